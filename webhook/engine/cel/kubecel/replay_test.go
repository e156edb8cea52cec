package main

// A profile of a review's evaluations, replayed from a capture (QQ_CAPTURE: a JSON file of
// {policies: {handle: spec}, activations: {handle: json}, calls: [[policy, activation,
// requests]]}, as a Python harness records them):
//
//	QQ_CAPTURE=/tmp/capture.json go test -run '^$' -bench Replay -cpuprofile cpu.out

import (
	gojson "encoding/json"
	"os"
	"strconv"
	"testing"
)

type capture struct {
	Policies    map[string]compileSpec `json:"policies"`
	Activations map[string]string      `json:"activations"`
	Calls       [][3]gojson.RawMessage `json:"calls"`
}

func BenchmarkReplay(b *testing.B) {
	path := os.Getenv("QQ_CAPTURE")
	if path == "" {
		b.Skip("QQ_CAPTURE names no capture")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var c capture
	if err := gojson.Unmarshal(data, &c); err != nil {
		b.Fatal(err)
	}
	policies := map[string]*policy{}
	for handle, spec := range c.Policies {
		result, err := compile(spec)
		if err != nil {
			b.Fatal(err)
		}
		policies[handle] = lookup(result.Handle).(*policy)
	}
	var activation string
	for _, a := range c.Activations {
		activation = a
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := parseReview([]byte(activation))
		if err != nil {
			b.Fatal(err)
		}
		for _, call := range c.Calls {
			var handle int64
			_ = gojson.Unmarshal(call[0], &handle)
			var text string
			_ = gojson.Unmarshal(call[2], &text)
			var requests []evalRequest
			if err := gojson.Unmarshal([]byte(text), &requests); err != nil {
				b.Fatal(err)
			}
			p := policies[strconv.FormatInt(handle, 10)]
			results := make([]evalResult, len(requests))
			for j, request := range requests {
				results[j] = p.evaluate(r, request)
			}
			if _, err := gojson.Marshal(results); err != nil {
				b.Fatal(err)
			}
		}
	}
}
