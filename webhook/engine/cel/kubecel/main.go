// Kubernetes' own CEL for quickq-guard, as a C library Python loads with ctypes
// (webhook/engine/cel/kubecel.py).
//
// A policy's expressions are compiled as the ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy plugins of kube-apiserver compile them: the base environment of the
// release (environment.MustBaseEnvSet), the composited compiler with its `variables`, stored
// expressions, the plugins' own expression accessors and return types. quickq-guard's scopes
// add `podSpec` (and, in container scope, `container` and `containerGroup`), dynamic values
// the engine binds. An evaluation runs on one activation per review, parsed once from JSON,
// and is charged as the plugins charge it: the per-call limit of the environment, the cost of
// the variables it reads, and the budget the caller passes.
//
// Every exported function returns JSON (freed by qq_free) and turns a panic into an error.
package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"context"
	gojson "encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime/debug"
	"sync"
	"unsafe"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	"google.golang.org/protobuf/types/known/structpb"

	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/mutation"
)

// The release whose CEL this is: kube-apiserver 1.36 compiles admission policies for its
// minimum compatibility version, one minor back.
var compatibility = version.MajorMinor(1, 35)

const (
	perCallLimit           = celconfig.PerCallLimit
	policyBudget           = celconfig.RuntimeCELCostBudget
	matchConditionsBudget  = celconfig.RuntimeCELCostBudgetMatchConditions
	outOfBudget            = "validation failed due to running out of cost budget, no further validation rules will be run"
	containersName         = "qq__containers"
	groupsName             = "qq__groups"
	podsName               = "qq__pods"
	podOfName              = "qq__pod_of"
	paramsName             = "qq__params"
	kindBool, kindString   = "bool", "string"
	kindJSONPatch, kindAny = "jsonpatch", "any"
)

// ---- handles: what Python holds is a number ----

var (
	handlesMu sync.Mutex
	handles   = map[int64]any{}
	next      int64
)

func keep(value any) int64 {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	next++
	handles[next] = value
	return next
}

func lookup(handle int64) any {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	return handles[handle]
}

// ---- environments ----

// The base environment with quickq-guard's scope variables, one per scope, built once.
var (
	envOnce sync.Once
	envs    map[string]*environment.EnvSet
)

func scopeEnv(scope string) (*environment.EnvSet, error) {
	envOnce.Do(func() {
		base := environment.MustBaseEnvSet(compatibility)
		envs = map[string]*environment.EnvSet{"vap": base}
		for name, extra := range map[string][]string{
			"object":    {"podSpec"},
			"container": {"podSpec", "container", "containerGroup"},
		} {
			options := make([]celgo.EnvOption, 0, len(extra))
			for _, variable := range extra {
				options = append(options, celgo.Variable(variable, celgo.DynType))
			}
			extended, err := base.Extend(environment.VersionedOptions{
				IntroducedVersion: version.MajorMinor(1, 0), EnvOptions: options})
			if err != nil {
				panic(err)
			}
			envs[name] = extended
		}
	})
	env, ok := envs[scope]
	if !ok {
		return nil, fmt.Errorf("unknown scope %q", scope)
	}
	return env, nil
}

// ---- compiling ----

type accessor struct {
	text    string
	returns []*celgo.Type
}

func (a *accessor) GetExpression() string      { return a.text }
func (a *accessor) ReturnTypes() []*celgo.Type { return a.returns }

// What each kind of expression must yield, as the plugins' own accessors declare it
// (validating.ValidationCondition and MessageExpressionCondition, patch.JSONPatchCondition and
// ApplyConfigurationCondition, matchconditions.MatchCondition, validating.Variable): declared
// here rather than imported, since importing those packages would link the whole of their
// plugins into the library.
var (
	jsonPatchType          = types.NewObjectType("JSONPatch")
	applyConfigurationType = types.NewObjectType("Object")
	anyTypes               = []*celgo.Type{celgo.AnyType, celgo.DynType}
)

func accessorOf(kind, text string) plugincel.ExpressionAccessor {
	switch kind {
	case kindBool, "matchcondition":
		return &accessor{text, []*celgo.Type{celgo.BoolType}}
	case kindString:
		return &accessor{text, []*celgo.Type{celgo.StringType}}
	case kindJSONPatch:
		return &accessor{text, []*celgo.Type{celgo.ListType(jsonPatchType)}}
	case "applyconfiguration":
		return &accessor{text, []*celgo.Type{applyConfigurationType}}
	}
	return &accessor{text, anyTypes}
}

// storedVariable is a policy's variable, as the composited compiler stores it.
type storedVariable struct {
	name, text string
}

func (v *storedVariable) GetExpression() string      { return v.text }
func (v *storedVariable) ReturnTypes() []*celgo.Type { return anyTypes }
func (v *storedVariable) GetName() string            { return v.name }

type compileSpec struct {
	Scope     string `json:"scope"`
	Variables []struct {
		Name       string `json:"name"`
		Expression string `json:"expression"`
	} `json:"variables"`
	Expressions []struct {
		Expression string `json:"expression"`
		Kind       string `json:"kind"`
	} `json:"expressions"`
	Batches []struct {
		Indices []int `json:"indices"`
		Masked  bool  `json:"masked"`
	} `json:"batches"`
	Params bool `json:"params"`
	// Authorizer: declared as the plugins declare it (only for checking exported policies:
	// the engine has no authorizer to bind).
	Authorizer bool `json:"authorizer"`
}

type batch struct {
	indices []int
	masked  bool
}

type policy struct {
	compiler    *plugincel.CompositedCompiler
	expressions []plugincel.CompilationResult
	kinds       []string
	batches     []batch
}

type compileResult struct {
	Handle         int64     `json:"handle,omitempty"`
	Errors         []*string `json:"errors"`
	VariableErrors []*string `json:"variableErrors"`
	Types          []string  `json:"types"`
}

func compile(spec compileSpec) (compileResult, error) {
	env, err := scopeEnv(spec.Scope)
	if err != nil {
		return compileResult{}, err
	}
	compiler, err := plugincel.NewCompositedCompiler(env)
	if err != nil {
		return compileResult{}, err
	}
	options := plugincel.OptionalVariableDeclarations{HasParams: spec.Params, HasAuthorizer: spec.Authorizer}
	result := compileResult{Errors: []*string{}, VariableErrors: []*string{}, Types: []string{}}
	for _, variable := range spec.Variables {
		compiled := compiler.CompileAndStoreVariable(
			&storedVariable{variable.Name, variable.Expression},
			options, environment.StoredExpressions)
		result.VariableErrors = append(result.VariableErrors, problem(compiled))
	}
	p := &policy{compiler: compiler}
	for _, expression := range spec.Expressions {
		opts := options
		if expression.Kind == kindJSONPatch || expression.Kind == "applyconfiguration" {
			opts.HasPatchTypes = true
		}
		compiled := compiler.CompileCELExpression(accessorOf(expression.Kind, expression.Expression),
			opts, environment.StoredExpressions)
		p.expressions = append(p.expressions, compiled)
		p.kinds = append(p.kinds, expression.Kind)
		result.Errors = append(result.Errors, problem(compiled))
		typed := ""
		if compiled.OutputType != nil {
			typed = compiled.OutputType.String()
		}
		result.Types = append(result.Types, typed)
	}
	for _, b := range spec.Batches {
		for _, index := range b.Indices {
			if index < 0 || index >= len(p.expressions) {
				return compileResult{}, fmt.Errorf("batch index %d out of range", index)
			}
		}
		p.batches = append(p.batches, batch{b.Indices, b.Masked})
	}
	result.Handle = keep(p)
	return result, nil
}

func problem(compiled plugincel.CompilationResult) *string {
	if compiled.Error == nil {
		return nil
	}
	text := compiled.Error.Error()
	return &text
}

// ---- activations ----

// The variables of a review, parsed once: `object`, `oldObject`, `request`,
// `namespaceObject`, `podSpec`, the lone `container` and `containerGroup`, or the lists of
// the containers, their groups and pod specs, and every policy's params by its key.
type review struct {
	values     map[string]any
	containers []any
	groups     []any
	pods       []any
	podOf      []int64
	params     map[string]any
}

func parseReview(data []byte) (*review, error) {
	var values map[string]any
	if err := json.Unmarshal(data, &values); err != nil {
		return nil, fmt.Errorf("the activation is not a JSON object: %w", err)
	}
	r := &review{values: values}
	r.containers, _ = values[containersName].([]any)
	r.groups, _ = values[groupsName].([]any)
	r.pods, _ = values[podsName].([]any)
	if list, ok := values[podOfName].([]any); ok {
		for _, item := range list {
			number, _ := item.(int64)
			r.podOf = append(r.podOf, number)
		}
	}
	r.params, _ = values[paramsName].(map[string]any)
	for _, name := range []string{containersName, groupsName, podsName, podOfName, paramsName} {
		delete(values, name)
	}
	return r, nil
}

// One evaluation's activation: the review's values, a container's, a policy's params and
// its lazy `variables`.
type activation struct {
	review    *review
	container int
	params    any
	variables any
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "variables":
		return a.variables, true
	case "params":
		return a.params, true
	case "container", "containerGroup", "podSpec":
		if a.container >= 0 {
			return a.review.ofContainer(name, a.container)
		}
	}
	value, ok := a.review.values[name]
	if !ok {
		switch name {
		case "object", "oldObject", "request", "namespaceObject", "podSpec":
			return nil, true // as the plugins bind an absent object: null
		}
	}
	return value, ok
}

func (a *activation) Parent() interpreter.Activation { return nil }

func (r *review) ofContainer(name string, index int) (any, bool) {
	if index >= len(r.containers) {
		return nil, false
	}
	switch name {
	case "container":
		return r.containers[index], true
	case "containerGroup":
		if index < len(r.groups) {
			return r.groups[index], true
		}
		return nil, false
	}
	if index < len(r.podOf) && r.podOf[index] > 0 && int(r.podOf[index]) < len(r.pods) {
		return r.pods[r.podOf[index]], true
	}
	value, ok := r.values["podSpec"]
	return value, ok
}

// ---- evaluating ----

type evalRequest struct {
	Index     int    `json:"i"`
	Container int    `json:"c"`
	Params    string `json:"p"`
	Budget    *int64 `json:"b"`
	Wanted    []int  `json:"w"`
}

type evalResult struct {
	Value  any    `json:"v"`
	Type   string `json:"t,omitempty"`
	Error  string `json:"e,omitempty"`
	Cost   int64  `json:"c"`
	Budget bool   `json:"budget,omitempty"` // the budget ran out (no further expression runs)
}

func (p *policy) evaluate(r *review, request evalRequest) evalResult {
	var params any
	if request.Params != "" && r.params != nil {
		params = r.params[request.Params]
	}
	a := &activation{review: r, container: request.Container, params: params}
	ctx := p.compiler.CreateContext(context.Background())
	a.variables = ctx.Variables(a)
	budget := int64(policyBudget)
	if request.Budget != nil {
		budget = *request.Budget
	}
	if request.Index < len(p.expressions) {
		value, cost, err := run(ctx, a, p.expressions[request.Index], budget)
		return p.result(request.Index, value, cost, err)
	}
	number := request.Index - len(p.expressions)
	if number >= len(p.batches) {
		return evalResult{Error: fmt.Sprintf("no expression %d", request.Index)}
	}
	b := p.batches[number]
	wanted := map[int]bool{}
	for _, item := range request.Wanted {
		wanted[item] = true
	}
	values := make([]any, len(b.indices))
	var total int64
	for position, index := range b.indices {
		if b.masked && !wanted[position] {
			continue
		}
		value, cost, err := run(ctx, a, p.expressions[index], budget-total)
		total += cost
		item := p.result(index, value, cost, err)
		if item.Error != "" {
			item.Cost = total
			return item
		}
		values[position] = item.Value
	}
	return evalResult{Value: values, Type: "list", Cost: total}
}

type budgetError struct{}

func (budgetError) Error() string { return outOfBudget }

// run evaluates one compiled expression as the plugins' activation.Evaluate does: the cost of
// the variables it read, then its own, each against what is left of the budget.
func run(ctx plugincel.CompositionContext, a *activation, compiled plugincel.CompilationResult,
	budget int64) (ref.Val, int64, error) {
	if compiled.Error != nil {
		return nil, 0, fmt.Errorf("compilation error: %v", compiled.Error)
	}
	value, details, err := compiled.Program.ContextEval(ctx, a)
	spent := ctx.GetAndResetCost()
	if spent > budget {
		return nil, spent, budgetError{}
	}
	if details == nil || details.ActualCost() == nil {
		return nil, spent, errors.New("runtime cost could not be calculated for expression: " +
			compiled.ExpressionAccessor.GetExpression() + ", no further expression will be run")
	}
	cost := *details.ActualCost()
	if cost > math.MaxInt64 || int64(cost) > budget-spent {
		return nil, spent + int64(min(cost, math.MaxInt64)), budgetError{}
	}
	spent += int64(cost)
	return value, spent, err
}

func (p *policy) result(index int, value ref.Val, cost int64, err error) evalResult {
	if err != nil {
		var out budgetError
		return evalResult{Error: err.Error(), Cost: cost, Budget: errors.As(err, &out)}
	}
	if p.kinds[index] == kindJSONPatch {
		operations, err := jsonPatch(value)
		if err != nil {
			return evalResult{Error: err.Error(), Cost: cost}
		}
		return evalResult{Value: operations, Type: "list", Cost: cost}
	}
	native, err := plain(value)
	if err != nil {
		return evalResult{Error: err.Error(), Cost: cost}
	}
	return evalResult{Value: native, Type: typeName(value), Cost: cost}
}

func typeName(value ref.Val) string {
	switch value.Type() {
	case types.BoolType:
		return "bool"
	case types.IntType:
		return "int"
	case types.UintType:
		return "uint"
	case types.DoubleType:
		return "double"
	case types.StringType:
		return "string"
	case types.BytesType:
		return "bytes"
	case types.NullType:
		return "null"
	case types.TimestampType:
		return "timestamp"
	case types.DurationType:
		return "duration"
	case types.OptionalType:
		return "optional"
	case types.TypeType:
		return "type"
	}
	if _, ok := value.(traits.Lister); ok {
		return "list"
	}
	if _, ok := value.(traits.Mapper); ok {
		return "map"
	}
	return value.Type().TypeName()
}

var jsonValueType = reflect.TypeOf(&structpb.Value{})

// plain is a value as JSON data: numbers kept exact (an int is no double), a timestamp or a
// duration as their JSON forms, as the plugins write a value into a patch.
func plain(value ref.Val) (any, error) {
	switch v := value.(type) {
	case types.Bool:
		return bool(v), nil
	case types.Int:
		return int64(v), nil
	case types.Uint:
		return uint64(v), nil
	case types.Double:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Sprint(f), nil
		}
		return f, nil
	case types.String:
		return string(v), nil
	case types.Null:
		return nil, nil
	case *types.Optional:
		if !v.HasValue() {
			return nil, nil
		}
		return plain(v.GetValue())
	case traits.Mapper:
		out := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			key := it.Next()
			item, err := plain(v.Get(key))
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(key.Value())] = item
		}
		return out, nil
	case traits.Lister:
		out := []any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			item, err := plain(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		return out, nil
	case types.Bytes:
		return string(v), nil
	}
	if value.Type() == types.TypeType {
		return fmt.Sprint(value.Value()), nil
	}
	native, err := value.ConvertToNative(jsonValueType)
	if err != nil {
		return nil, fmt.Errorf("the value (%s) has no JSON form", value.Type().TypeName())
	}
	return native.(*structpb.Value).AsInterface(), nil
}

// jsonPatch: the operations a JSONPatch expression yields, as the mutating plugin reads them.
func jsonPatch(value ref.Val) ([]any, error) {
	list, ok := value.(traits.Lister)
	if !ok {
		return nil, errors.New("type mismatch: JSONPatchType.expression should evaluate to array")
	}
	operations := []any{}
	for it := list.Iterator(); it.HasNext() == types.True; {
		native, err := it.Next().ConvertToNative(reflect.TypeOf(&mutation.JSONPatchVal{}))
		if err != nil {
			return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch: %w", err)
		}
		op := native.(*mutation.JSONPatchVal)
		operation := map[string]any{"op": op.Op, "path": op.Path}
		if op.From != "" {
			operation["from"] = op.From
		}
		if op.Val != nil {
			v, err := op.Val.ConvertToNative(jsonValueType)
			if err != nil {
				return nil, fmt.Errorf("JSONPath valueExpression evaluated to a type that could not marshal to JSON: %w", err)
			}
			raw, err := gojson.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("JSONPath valueExpression evaluated to a type that could not marshal to JSON: %w", err)
			}
			var decoded any
			if err := json.Unmarshal(raw, &decoded); err != nil {
				return nil, err
			}
			operation["value"] = decoded
		}
		operations = append(operations, operation)
	}
	return operations, nil
}

// ---- the C interface ----

func reply(value any) *C.char {
	out, err := gojson.Marshal(value)
	if err != nil {
		out, _ = gojson.Marshal(map[string]string{"error": "the result has no JSON form: " + err.Error()})
	}
	return C.CString(string(out))
}

func failed(err any) *C.char {
	return reply(map[string]string{"error": fmt.Sprint(err)})
}

// answerPanic, deferred by each exported function, turns a panic while it was `what` into
// the error answer its caller reads, instead of a crashed process.
func answerPanic(out **C.char, what string) {
	if r := recover(); r != nil {
		*out = failed(fmt.Sprintf("panic while %s: %v", what, r))
	}
}

// evaluateEach evaluates requests of p on one activation, a result each.
func (p *policy) evaluateEach(r *review, requests []evalRequest) []evalResult {
	results := make([]evalResult, len(requests))
	for i, request := range requests {
		results[i] = p.evaluate(r, request)
	}
	return results
}

// qq_compile compiles a policy (compileSpec) and returns {handle, errors, variableErrors,
// types} or {error}.
//
//export qq_compile
func qq_compile(data *C.char, size C.int) (out *C.char) {
	defer answerPanic(&out, "compiling")
	var spec compileSpec
	if err := gojson.Unmarshal(C.GoBytes(unsafe.Pointer(data), size), &spec); err != nil {
		return failed(err)
	}
	result, err := compile(spec)
	if err != nil {
		return failed(err)
	}
	return reply(result)
}

// qq_activation parses a review's variables (JSON) and returns {handle} or {error}.
//
//export qq_activation
func qq_activation(data *C.char, size C.int) (out *C.char) {
	defer answerPanic(&out, "reading the activation")
	r, err := parseReview(C.GoBytes(unsafe.Pointer(data), size))
	if err != nil {
		return failed(err)
	}
	return reply(map[string]int64{"handle": keep(r)})
}

// qq_eval evaluates expressions of a compiled policy on an activation: one evalRequest or a
// list of them, which share nothing but the activation; returns one evalResult per request.
//
//export qq_eval
func qq_eval(policyHandle, reviewHandle C.longlong, data *C.char, size C.int) (out *C.char) {
	defer answerPanic(&out, "evaluating")
	p, ok := lookup(int64(policyHandle)).(*policy)
	if !ok {
		return failed("no such policy handle")
	}
	r, ok := lookup(int64(reviewHandle)).(*review)
	if !ok {
		return failed("no such activation handle")
	}
	var requests []evalRequest
	if err := gojson.Unmarshal(C.GoBytes(unsafe.Pointer(data), size), &requests); err != nil {
		return failed(err)
	}
	return reply(p.evaluateEach(r, requests))
}

// qq_eval_all evaluates, on one activation, the expressions of several compiled policies:
// [[policy handle, [evalRequest...]]...] in, one list of evalResults per policy out (null for
// a policy handle it does not know). One call for what a review evaluates up front.
//
//export qq_eval_all
func qq_eval_all(reviewHandle C.longlong, data *C.char, size C.int) (out *C.char) {
	defer answerPanic(&out, "evaluating")
	r, ok := lookup(int64(reviewHandle)).(*review)
	if !ok {
		return failed("no such activation handle")
	}
	var calls [][2]gojson.RawMessage // [policy handle, [evalRequest...]]
	if err := gojson.Unmarshal(C.GoBytes(unsafe.Pointer(data), size), &calls); err != nil {
		return failed(err)
	}
	answers := make([][]evalResult, len(calls))
	for i, call := range calls {
		var handle int64
		var requests []evalRequest
		if err := gojson.Unmarshal(call[0], &handle); err != nil {
			return failed(err)
		}
		if err := gojson.Unmarshal(call[1], &requests); err != nil {
			return failed(err)
		}
		if p, ok := lookup(handle).(*policy); ok {
			answers[i] = p.evaluateEach(r, requests)
		}
	}
	return reply(answers)
}

// qq_release forgets a handle (a policy or an activation).
//
//export qq_release
func qq_release(handle C.longlong) {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	delete(handles, int64(handle))
}

// qq_free frees a string this library returned.
//
//export qq_free
func qq_free(text *C.char) {
	C.free(unsafe.Pointer(text))
}

// qq_info: the limits and the compatibility version, for the binding and its tests.
//
//export qq_info
func qq_info() *C.char {
	return reply(map[string]any{
		"compatibilityVersion":                compatibility.String(),
		"defaultCompatibilityVersion":         environment.DefaultCompatibilityVersion().String(),
		"perCallLimit":                        perCallLimit,
		"runtimeCELCostBudget":                policyBudget,
		"runtimeCELCostBudgetMatchConditions": matchConditionsBudget,
	})
}

// A policy's evaluation allocates little that lives, so the heap stays small and the default
// GOGC=100 collects every few reviews: 400 took a third off an evaluation (one review's
// Go time 830/830/560 -> 540/580/320 µs replaying a restricted Pod's requests, 2026-12-07),
// and the soft limit keeps the heap well inside a worker's share of the chart's memory
// limit. GOGC or GOMEMLIMIT in the environment decide instead.
func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(128 << 20)
	}
}

func main() {}
