"""What the type-checked expression shows is refused when the policy loads: a list or map
literal of mixed types (Kubernetes' CEL refuses it), an optional handed to a function served
by Python (the runtime crashed on it), isInteger() of a quantity whose Kubernetes scale
quickq-guard does not keep. tests/cluster/test_cel_vs_vap.py holds the same cases against
the API server."""

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
    "int(' 4') == 4 &&\n  [1, 'a'].size() == 2": "line 2, column 7:",
}
ACCEPTED = ["[1, 2, 3]", "[[], [1]]", "[{}, {'a': 1}]", "[?optional.of(1), 2]",
            "[dyn(1), dyn('a')]", "'%d %s'.format([1, 'a'])", "{'a': [1], 'b': []}"]


@pytest.mark.parametrize("text", REFUSED)
def test_a_literal_of_mixed_types_does_not_compile(text):
    with pytest.raises(CelError) as caught:
        compile_expression(text, "object")
    assert REFUSED[text] in str(caught.value)
    assert "write every one of them as dyn(...)" in str(caught.value)


@pytest.mark.parametrize("text", ACCEPTED)
def test_a_literal_of_one_type_compiles(text):
    compile_expression(text, "object")


@pytest.mark.parametrize("text", ["'%s'.format([optional.of(1)]) != ''",
                                  "'%s'.format([object.?a]) != ''"])
def test_an_optional_is_never_handed_to_python(text):
    with pytest.raises(CelError) as caught:
        compile_expression(text, "object")
    assert "is given an optional" in str(caught.value)
    assert "take its value first" in str(caught.value)


@pytest.mark.parametrize("text", ["[optional.of(1)].sum() == 1", "[object.?a].isSorted()",
                                  "quantity(object.?a.orValue('1')) == quantity('1') && "
                                  "[object.?b].max() == 1"])
def test_a_list_of_optionals_has_no_lists_library_overload_as_in_kubernetes(text):
    with pytest.raises(CelError) as caught:
        compile_expression(text, "object")
    assert "found no matching overload for" in str(caught.value)


@pytest.mark.parametrize(("text", "what"), [
    ("quantity('1000m').isInteger()", "isInteger() of quantity('1000m')"),
    ("quantity('0.5Gi').asInteger() > 0", "asInteger() of quantity('0.5Gi')"),
    ("quantity('500m').add(quantity('500m')).isInteger()",
     "isInteger() of a quantity's add() with a term of another scale"),
    ("quantity(object.cpu).sub(quantity('1')).asInteger() > 0",
     "asInteger() of a quantity's sub() with a term of another scale")])
def test_is_integer_of_a_scale_quickq_guard_does_not_keep_is_refused(text, what):
    with pytest.raises(CelError) as caught:
        compile_expression(text, "object")
    assert what in str(caught.value) and "compare the quantity instead" in str(caught.value)


@pytest.mark.parametrize("text", [
    "quantity('1.5').isInteger()", "quantity('1e3').asInteger() == 1000",
    "quantity(object.cpu).isInteger()", "quantity('1k').sub(1).asInteger() == 999",
    "quantity('2').add(quantity('1')).isInteger()"])
def test_is_integer_kubernetes_answers_the_same_compiles(text):
    compile_expression(text, "object")
