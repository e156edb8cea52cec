"""The Kubernetes CEL library functions, as a policy's validation sees them: true passes,
false is a finding, and a failure is an error that does not echo the value it read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from builders import pod

from webhook import decode, evaluate, load_policies

SECRET = "s3cr3t-Value-that-must-not-show"


def judge(tmp_path: Path, expression: str, **container: object) -> tuple[str, str]:
    folder = tmp_path / "p"
    folder.mkdir(exist_ok=True)
    (folder / "p.yaml").write_text(yaml.safe_dump({
        "id": "library", "description": "d", "type": "validate", "action": "enforce",
        "scope": "container", "validations": [{"expression": expression, "message": "no"}]}))
    decision = evaluate(decode(pod({"name": "c", "image": "app:1", **container})),
                        load_policies(folder))
    [result] = decision.results
    return result.status, result.reason


TRUE = [
    "quantity('1Gi') == quantity('1024Mi')",
    "quantity('500m').isLessThan(quantity('1'))",
    "quantity('2').isGreaterThan(quantity('1500m'))",
    "quantity('1.5').compareTo(quantity('1500m')) == 0",
    "quantity('1Gi').asInteger() == 1073741824",
    "quantity('100m').asApproximateFloat() == 0.1",
    "!quantity('100m').isInteger() && quantity('2k').isInteger()",
    "quantity('1').add(quantity('500m')) == quantity('1.5')",
    "quantity('1').sub(2).isLessThan(quantity('0'))",
    "isQuantity('256Mi') && !isQuantity('1GB') && !isQuantity('500mi')",
    # as the API server reads them: E and Ei are suffixes, a nano is the least amount, a
    # binary amount is capped at int64's largest
    "isQuantity('1Ei') && quantity('1E').isGreaterThan(quantity('1P'))",
    "quantity('1.5n') == quantity('2n') && quantity('1e-1000').isGreaterThan(quantity('0'))",
    "quantity('16Ei').compareTo(quantity('9223372036854775807')) == 0",
    "container.resources.limits.all(r, quantity(container.resources.requests[r])"
    ".compareTo(quantity(container.resources.limits[r])) <= 0)",
    "url('https://example.com:8443/a/b?x=1&x=2').getHostname() == 'example.com'",
    "url('https://example.com:8443/a').getPort() == '8443'",
    "url('https://[::1]:80/').getHostname() == '::1'",
    "url('https://example.com/a%20b?x=1&x=2').getQuery()['x'] == ['1', '2']",
    "url('http://example.com/a%20b').getEscapedPath() == '/a%20b'",
    "isURL('/relative/ok') && !isURL('not a url')",
    # as Go's net/url reads and writes them: the host unescaped, the path escaped, the query
    # without a malformed pair, == on the URL Go writes, an opaque URL, any digits as port
    "url('https://[fe80::1%25en0]:8080/').getHost() == '[fe80::1%en0]:8080'",
    "url('https://example.com/a b').getEscapedPath() == '/a%20b'",
    "url('https://example.com/ü').getEscapedPath() == '/%C3%BC'",
    "url('https://example.com/?a;b=1&q=%zz&c=3').getQuery() == {'c': ['3']}",
    "url('HTTPS://Example.COM/') == url('https://Example.COM/')",
    "url('mailto:a@example.com').getScheme() == 'mailto' && "
    "url('mailto:a@example.com').getHost() == ''",
    "url('https://example.com:99999/').getPort() == '99999'",
    "!isURL('http://a:b:80/') && isURL('ftp://a:b:80/') && !isURL('https://[1.2.3.4]/')",
    # Go's strings.Split: an empty string split by an empty one has no item
    "''.split('') == [] && ''.split('', 2) == [] && ''.split(',') == ['']",
    # as Go's url.ParseRequestURI, which Kubernetes' isURL asks
    "isURL('mailto:ops@example.com') && isURL('https://') && isURL('https://a.example:8443/x')",
    "!isURL('https://a b.example/') && !isURL('https://a.example:port/') && !isURL('/a%zz')",
    "!isURL('') && !isURL(':80') && isURL('https://[::1]:80/') && !isURL('relative/path')",
    "ip('10.0.0.1').family() == 4 && ip('::1').family() == 6",
    "ip('127.0.0.1').isLoopback() && ip('0.0.0.0').isUnspecified()",
    "ip('169.254.1.1').isLinkLocalUnicast() && ip('224.0.0.1').isLinkLocalMulticast()",
    "ip('8.8.8.8').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
    "ip.isCanonical('10.0.0.1') && !ip.isCanonical('2001:DB8::1')",
    "!isIP('::ffff:10.0.0.1') && !isIP('fe80::1%eth0') && isIP('fe80::1')",
    "cidr('10.0.0.0/8').containsIP('10.1.2.3') && !cidr('10.0.0.0/8').containsIP('11.0.0.1')",
    "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')",
    "string(cidr('10.1.2.3/8').masked()) == '10.0.0.0/8' && "
    "string(cidr('10.1.2.3/8').ip()) == '10.1.2.3'",
    "cidr('10.0.0.0/8').prefixLength() == 8 && isCIDR('::/0') && !isCIDR('10.0.0.0')",
    # as Go's netip: a multicast address of link-local scope whatever its flags, no leading
    # zero in a prefix length
    "ip('ff12::1').isLinkLocalMulticast() && !ip('ff05::1').isLinkLocalMulticast()",
    "!isCIDR('1.2.3.4/08') && isCIDR('1.2.3.4/0')",
    "[1, 2, 3].isSorted() && ![3, 1].isSorted() && [1, 2, 3].sum() == 6",
    "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && [1.5, 2.5].sum() == 4.0",
    "'registry.example.com/app:1.2.3'.find('[0-9]+\\\\.[0-9]+') == '1.2'",
    "'a1b22c333'.findAll('[0-9]+') == ['1', '22', '333']",
    "'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22']",
    "'abc'.find('x') == ''",
    "container.image.split(':')[1] == '1' && 'A'.lowerAscii() == 'a'",
    "container.?securityContext.?runAsUser.orValue(0) == 0",
]


@pytest.mark.parametrize("expression", TRUE)
def test_library_functions_give_what_kubernetes_gives(tmp_path, expression):
    resources = {"requests": {"cpu": "500m", "memory": "1Gi"},
                 "limits": {"cpu": "1", "memory": "1Gi"}}
    assert judge(tmp_path, expression, resources=resources) == ("pass", "")


def test_a_false_expression_is_a_finding(tmp_path):
    assert judge(tmp_path, "quantity('2').isLessThan(quantity('1'))")[0] == "fail"


@pytest.mark.parametrize(("expression", "problem"), [
    # the API server's messages; where one quotes the value, quickq-guard hides it
    ("quantity(container.env[0].value) == quantity('1')", "quantities must match"),
    ("url(container.env[0].value).getScheme() == ''", "URL parse error"),
    ("ip(container.env[0].value).family() == 0", "unable to parse IP"),
    ("cidr(container.env[0].value).prefixLength() == 0", "network address parse error"),
    ("quantity('1.5').asInteger() == 1", "cannot convert value to integer"),
    ("[].min() == 0", "min called on empty list"),
    ("'a'.find(container.env[0].value + '(?=') == ''", "error parsing regexp"),
    ("'a'.matches(container.env[0].value + '(')", "error parsing regexp: missing closing )"),
    ("{'a': 1}[container.env[0].value] == 1", "no such key (a key taken from the object)"),
    ("container.env.exists(e, e.name == 'X') && {'b': 1}[container.env[0].value] == 1",
     "no such key (a key taken from the object)"),
])
def test_a_failing_function_is_an_error_that_does_not_echo_the_value(tmp_path, expression,
                                                                      problem):
    status, reason = judge(tmp_path, expression, env=[{"name": "X", "value": SECRET}])
    assert status == "error" and problem in reason and SECRET not in reason


def test_a_missing_key_the_expression_spells_is_named(tmp_path):
    status, reason = judge(tmp_path, "container.securityContext.runAsUser == 0")
    assert status == "error" and "no such key: securityContext" in reason


def test_find_runs_on_re2_so_a_pattern_that_backtracks_elsewhere_cannot(tmp_path):
    """RE2 takes time linear in the text: (a+)+$ on 50,000 a's and a b is answered (a
    backtracking engine would take for ever), and a backreference, which only a
    backtracking engine can run, is refused."""
    status, _ = judge(tmp_path, "container.env[0].value.find('(a+)+$') == ''",
                      env=[{"name": "X", "value": "a" * 50_000 + "b"}])
    assert status == "pass"
    status, reason = judge(tmp_path, "container.name.find(container.env[0].value) == ''",
                           env=[{"name": "X", "value": "(a)\\1"}])
    assert status == "error" and "error parsing regexp" in reason, reason


@pytest.mark.parametrize("expression", [
    "'a'.find('(?=a)') == ''", "container.name.find('(a)\\\\1') == ''",
    "container.name.matches('(')", "matches(container.name, '[')",
    # Go's regexp, which Kubernetes runs, has no \C (any byte); RE2 has
    "container.name.matches('a\\\\C')", "container.name.findAll('\\\\C').size() == 0",
])
def test_a_literal_pattern_that_does_not_compile_is_refused_at_load(tmp_path, expression):
    from webhook import PolicyError

    with pytest.raises(PolicyError) as refused:
        judge(tmp_path, expression)
    assert "error parsing regexp" in str(refused.value) \
        or "invalid matches argument" in str(refused.value)  # the API server's messages


@pytest.mark.parametrize(("pattern", "found"), [
    # Go's FindAllString: an empty match where the previous one ended is not another
    ("a*", ["aaa"]), ("$", [""]), ("(?:)", ["", "", "", ""]), ("a??", ["", "", "", ""]),
    ("(?m)^a", ["a"]),
])
def test_find_all_finds_what_go_finds(tmp_path, pattern, found):
    expression = f"'aaa'.findAll(container.env[0].value) == {found!r}"
    assert judge(tmp_path, expression, env=[{"name": "X", "value": pattern}]) == ("pass", "")


def test_a_pattern_from_the_object_is_held_to_go_s_syntax(tmp_path):
    status, reason = judge(tmp_path, "container.name.matches(container.env[0].value)",
                           env=[{"name": "X", "value": "c\\C"}])
    assert status == "error" and "error parsing regexp" in reason, reason


def test_a_value_cel_cannot_hold_is_an_error_that_does_not_echo_it(tmp_path):
    status, reason = judge(tmp_path, "container.name != ''", ports=[{"containerPort": 2**70}])
    assert status == "error" and "a number beyond 64 bits" in reason
    assert str(2**70) not in reason


# Where another CEL runtime and Kubernetes' (cel-go) disagreed, as a real API server's
# ValidatingAdmissionPolicy showed (tests/cluster/test_cel_vs_vap.py).
AS_KUBERNETES = [
    "'qq-'.substring(0, 3) == 'qq-' && 'qq-'.substring(1, 3) == 'q-'",
    "'héllo'.substring(1, 3) == 'él' && 'qq-'.substring(3) == ''",
    "duration('500µs') == duration('500us') && duration('500μs') == duration('500us')",
    "duration('1500ms').getMilliseconds() == 1500",
    "int('+4') == 4 && int('-4') == -4 && int(2.9) == 2 && uint('42') == 42u",
    "double('1_000') == 1000.0 && double('1.5') == 1.5",
    "int(timestamp('2024-01-01T00:00:00Z')) == 1704067200",
    "'abc'.indexOf('a', 4) == -1 && 'héllo'.indexOf('l') == 2 && 'abc'.indexOf('', 2) == 2",
    "'abcabc'.lastIndexOf('bc') == 4 && 'abc'.lastIndexOf('c', 1) == -1",
    "[1, 2, 3].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2 && [[1]].indexOf([1]) == 0",
    "[1, 2, 3].slice(1, 3) == [2, 3] && ['a'].indexOf('b') == -1",
]
REFUSED_AS_KUBERNETES = [
    "int(' 4') == 4", "int('4 ') == 4", "uint('+4') == 4u", "double(' 1') == 1.0",
    "double('1e400') > 0.0", "timestamp('2024-01-01t00:00:00z') != timestamp(0)",
    "'qq-'.substring(0, 4) == 'qq-'", "'qq-'.substring(2, 1) == ''",
    "'abc'.indexOf('a', -1) == 0", "[1, 2, 3].slice(2, 4) == [3]",
    "cidr('10.0.0.0/8').containsIP('10.0.0.1/32')",
]


@pytest.mark.parametrize("expression", AS_KUBERNETES)
def test_conversions_and_substrings_are_as_in_kubernetes(tmp_path, expression):
    assert judge(tmp_path, expression) == ("pass", "")


@pytest.mark.parametrize("expression", REFUSED_AS_KUBERNETES)
def test_what_kubernetes_refuses_to_convert_is_an_error(tmp_path, expression):
    """An error on the object, or refused at load where the library folds a constant
    conversion (the API server refuses such a policy when it is created)."""
    from webhook import PolicyError

    try:
        status, reason = judge(tmp_path, expression)
    except PolicyError as refused:
        assert "type conversion error" in str(refused) or "invalid timestamp" in str(refused)
    else:
        assert status == "error", reason


def test_a_guarded_call_is_named_as_written_when_it_does_not_compile(tmp_path):
    from webhook import PolicyError

    with pytest.raises(PolicyError) as refused:
        judge(tmp_path, "int([1]) == 1")
    assert "int([1])" in str(refused.value) and "qq__" not in str(refused.value)
