"""Expressions Kubernetes' CEL does not compile (REFUSED, each with what the API server
says of it), and ones it runs (ACCEPTED), for tests/test_export.py (a policy refused at load,
or exported) and tests/cluster/test_export_refusals.py (the API server refuses or
accepts each). All are bool validations of a Pod."""

REFUSED = {
    "cel.bind(x, 2, x * x > 3)": "undeclared reference to 'cel'",
    "math.greatest(1, 2) == 2": "undeclared reference to 'math'",
    "math.least([3, 1]) == 1": "undeclared reference to 'math'",
    "math.ceil(1.2) == 2.0": "undeclared reference to 'math'",
    "math.floor(1.2) == 1.0": "undeclared reference to 'math'",
    "math.round(1.5) == 2.0": "undeclared reference to 'math'",
    "math.trunc(1.5) == 1.0": "undeclared reference to 'math'",
    "math.abs(-1) == 1": "undeclared reference to 'math'",
    "math.sign(-1) == -1": "undeclared reference to 'math'",
    "!math.isInf(1.0)": "undeclared reference to 'math'",
    "!math.isNaN(1.0)": "undeclared reference to 'math'",
    "math.isFinite(1.0)": "undeclared reference to 'math'",
    "math.bitAnd(1, 3) == 1": "undeclared reference to 'math'",
    "math.bitOr(1, 2) == 3": "undeclared reference to 'math'",
    "math.bitXor(1, 3) == 2": "undeclared reference to 'math'",
    "math.bitNot(1) == -2": "undeclared reference to 'math'",
    "math.bitShiftLeft(1, 2) == 4": "undeclared reference to 'math'",
    "math.bitShiftRight(4, 1) == 2": "undeclared reference to 'math'",
    "math.sqrt(4) == 2.0": "undeclared reference to 'math'",
    "base64.encode(b'a') == 'YQ=='": "undeclared reference to 'base64'",
    "base64.decode('YQ==') == b'a'": "undeclared reference to 'base64'",
    # `object` is dyn: reverse() resolves to the lists library's, which yields a list
    "object.metadata.name.reverse() != ''":
        "found no matching overload for '_!=_' applied to '(list(dyn), string)'",
    "quantity('-1').sign() == -1":
        "found no matching overload for 'sign' applied to 'kubernetes.Quantity.()'",
    "jsonpatch.escapeKey('a/b') == 'a~1b'": "undeclared reference to 'jsonpatch'",
    "qq__int('1') == '1'": "undeclared reference to 'qq__int'",
    "string(quantity('1')) == '1'":
        "found no matching overload for 'string' applied to '(kubernetes.Quantity)'",
    "quantity('1') == '1'":
        "found no matching overload for '_==_' applied to '(kubernetes.Quantity, string)'",
    "quantity('2').isGreaterThan('1')": "found no matching overload for 'isGreaterThan'",
    "url('https://a/').startsWith('https')": "found no matching overload for 'startsWith'",
    "[quantity('1'), '2'].size() == 2":
        "expected type 'kubernetes.Quantity' but found 'string'",
    "ip('10.0.0.1') == '10.0.0.1'":
        "found no matching overload for '_==_' applied to '(net.IP, string)'",
    "cidr('10.0.0.0/8').startsWith('10')": "found no matching overload for 'startsWith'",
    "string(url('https://a/')) != ''":
        "found no matching overload for 'string' applied to '(kubernetes.URL)'",
}
ACCEPTED = [
    "quantity('1Gi') == quantity('1024Mi')", "quantity('1').add(1).isInteger()",
    "quantity('2').isGreaterThan(quantity('1'))", "isQuantity('1')",
    "url('https://a/').getHost() == 'a'", "string(ip('10.0.0.1')) == '10.0.0.1'",
    "cidr('10.0.0.0/8').containsIP('10.0.0.1')", "[1, 2].indexOf(2) == 1",
    "'ab'.indexOf('b') == 1", "'ab'.substring(0, 2) == 'ab'", "strings.quote('a') != ''",
    "'%d %s'.format([1, 'a']) == '1 a'", "optional.of(1).optMap(x, x + 1).value() == 2",
    "[1].first().hasValue()", "[1, 2].sum() == 3", "'ab'.findAll('b') == ['b']",
    "[[], [1]].size() == 2", "int(object.metadata.?labels.n.orValue('1')) > 0",
    "duration('1s').getMilliseconds() == 1000",
    "string(cidr('10.0.0.1/8').masked()) == '10.0.0.0/8'", "cidr('10.0.0.1/8').ip().family() == 4",
    "cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))", "ip('::1').isLoopback()",
    "string(object.metadata.name) != '' && string(1.5) == '1.5'",
]

# A variable `v` and a validation that reads it: Kubernetes types `variables.v` by v's
# expression when that is made of CEL's own types, and as dyn when it holds a library's type
# (a Quantity, URL, IP or CIDR). Refused (with what `export` says of each) where Kubernetes'
# types are stricter than the engine's: getQuery() gives a map of lists of strings there,
# of lists of dyn here. (A misuse the engine's own types show, `variables.v == 'x'` with v an
# int, fails the load.)
REFUSED_WITH_VARIABLE = {
    ("url('https://a/?x=1').getQuery()", "variables.v.x.exists(s, s > 1)"):
        "found no matching overload for '_>_' applied to '(string, int)'",
    ("url('https://a/?x=1').getQuery()", "variables.v.x[0] + 1 > 0"):
        "found no matching overload for '_+_' applied to '(string, int)'",
}
ACCEPTED_WITH_VARIABLE = [
    ("quantity('1')", "variables.v.isGreaterThan(quantity('0'))"),
    ("quantity('1')", "variables.v == '1'"),  # a Quantity variable is dyn in Kubernetes
    ("[quantity('1')]", "variables.v.exists(q, q == '1')"),
    ("url('https://a/')", "variables.v.getHost() == 'a'"),
    ("cidr('10.0.0.0/8')", "variables.v.containsIP('10.0.0.1')"),
    ("url('https://a/?x=1').getQuery()", "variables.v.x.exists(s, s == '1')"),
    ("object.spec.containers.size()", "variables.v > 0"),
    ("object.?metadata.?name", "variables.v.hasValue()"),
]
