"""What Kubernetes' type checker refuses is refused when the policy loads (a list or map
literal of mixed types), and what it accepts runs (optionals anywhere, quantities of any
scale: the library is Kubernetes' own, so nothing is refused for quickq-guard's sake any
more). tests/cluster/test_cel_vs_vap.py holds the same cases against the API server."""

import pytest

from webhook.engine.cel import CelError, compile_expression

REFUSED = {
    "[1, 2.0]": "line 1, column 5: expected type 'int' but found 'double'",
    "[1, dyn(2)]": "line 1, column 8: expected type 'int' but found 'dyn'",
    "[object.a, 1]": "expected type 'dyn' but found 'int'",
    "{'a': 1, 'b': 'x'}": "line 1, column 15: expected type 'int' but found 'string'",
    "{1: 'a', 'b': 'c'}": "expected type 'int' but found 'string'",
    "[[1], ['a']]": "expected type 'list(int)' but found 'list(string)'",
    "[null, 1]": "expected type 'null' but found 'int'",
    "[?optional.of(1), 'a']": "expected type 'int' but found 'string'",
    "[1, 2].map(x, [x, 'a']).size() > 0": "expected type 'int' but found 'string'",
    "1 == 1 &&\n  [1, 'a'].size() == 2": "line 2, column 7:",
}
ACCEPTED = ["[1, 2, 3]", "[[], [1]]", "[{}, {'a': 1}]", "[?optional.of(1), 2]",
            "[dyn(1), dyn('a')]", "'%d %s'.format([1, 'a'])", "{'a': [1], 'b': []}"]


@pytest.mark.parametrize("text", REFUSED)
def test_a_literal_of_mixed_types_does_not_compile(text):
    with pytest.raises(CelError) as caught:
        compile_expression(text, "object")
    assert REFUSED[text] in str(caught.value)


@pytest.mark.parametrize("text", ACCEPTED)
def test_a_literal_of_one_type_compiles(text):
    compile_expression(text, "object")


@pytest.mark.parametrize("text", ["[optional.of(1)].sum() == 1", "[object.?a].isSorted()",
                                  "quantity(object.?a.orValue('1')) == quantity('1') && "
                                  "[object.?b].max() == 1"])
def test_a_list_of_optionals_has_no_lists_library_overload_as_in_kubernetes(text):
    with pytest.raises(CelError) as caught:
        compile_expression(text, "object")
    assert "found no matching overload for" in str(caught.value)


@pytest.mark.parametrize("text", [
    "quantity('1.5').isInteger()", "quantity('1e3').asInteger() == 1000",
    "quantity(object.cpu).isInteger()", "quantity('1k').sub(1).asInteger() == 999",
    "quantity('2').add(quantity('1')).isInteger()", "quantity('1Ti').isInteger()",
    "quantity('300m').asApproximateFloat() == 0.3", "quantity('1.5Gi').asApproximateFloat() > 1.0",
    "quantity(object.cpu).asApproximateFloat() > 0.0",
    # refused before, as scales quickq-guard's own quantities did not keep
    "quantity('1000m').isInteger()", "quantity('0.5Gi').asInteger() > 0",
    "quantity('9223372036854775807').asInteger() > 0", "quantity('1Pi').isInteger()",
    "quantity('0.1').add(quantity('0.2')).asApproximateFloat() > 0.0"])
def test_is_integer_kubernetes_answers_the_same_compiles(text):
    compile_expression(text, "object")


# An optional held in a list or map crashed an earlier CEL runtime: each is run in a process
# of its own, which must end normally with a value, a refusal or an evaluation error.
HELD_OPTIONALS = [
    "'%s'.format([{'a': 1, 'b': optional.none()}])",
    "'%s'.format([[{'a': dyn(optional.none())}]])",
    "'%s'.format([true ? object.?a : object.b])",
    "[dyn(optional.none())].min()", "[dyn(optional.of(1))].sum()",
    "[dyn(optional.none())].isSorted()", "{'a': dyn(optional.none())}", "optional.of(1)",
    "[dyn(optional.none())].slice(0, 1)",
]


@pytest.mark.parametrize("text", HELD_OPTIONALS)
def test_an_optional_held_in_a_list_or_map_never_reaches_python(text):
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from webhook.engine.cel import CelError, EvaluationError, activation, "
        "compile_expression, evaluate\n"
        "try:\n"
        "    compiled = compile_expression(sys.argv[1], 'object')\n"
        "    print(evaluate(compiled, activation('object', {'object': {'b': 1}})))\n"
        "except (CelError, EvaluationError) as error:\n"
        "    print(error)\n")
    done = subprocess.run([sys.executable, "-c", script, text], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-500:]


@pytest.mark.parametrize(("text", "value"), [
    # cel-go's optional library, version 2 as Kubernetes has it: unwrap, which the runtime's
    # has not, and Go's zero timestamp (year 1), not the Unix epoch
    ("optional.unwrap([optional.of(1), optional.none()])", [1]),
    ("[optional.of(1), optional.none(), optional.of(3)].unwrapOpt()", [1, 3]),
    ("optional.unwrap([optional.of(1)])[0] + 1", 2),
    ("optional.ofNonZeroValue(timestamp(0)).hasValue()", True),
    ("optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')).hasValue()", False),
    ("optional.ofNonZeroValue(0).hasValue()", False),
])
def test_optionals_as_kubernetes(text, value):
    from webhook.engine.cel import activation, evaluate

    assert evaluate(compile_expression(text, "object"), activation("object", {})) == value
