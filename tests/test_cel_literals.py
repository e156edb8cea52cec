"""A list or map literal of mixed types is refused when the policy loads, as Kubernetes' CEL
refuses it (tests/cluster/test_cel_vs_vap.py holds the same cases against the API server)."""

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
