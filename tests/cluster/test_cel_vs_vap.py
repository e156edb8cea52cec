"""Our CEL is Kubernetes' CEL: each expression of a table is evaluated by quickq-guard's
engine (webhook.engine.cel) and by the real API server's ValidatingAdmissionPolicy, and the
two must agree on the value, on an error, and on an expression that does not compile.

One policy per expression, each matching one ConfigMap by name (its rule's resourceNames).
Where the engine gives a value v, the policy's validation is `type(E) == T && E == v`
(denied: the server's value differs, and its messageExpression reads the server's value
back); where the engine fails, it is `[E].size() == 0`, which the server must fail too
("resulted in error", or, for a call on constants, by refusing the policy); where the engine
does not compile E, the API server must refuse the policy (`[E].size() == 1`). A ConfigMap
per expression is then created with server-side dry-run, in one kubectl call. Known
differences and quickq-guard's own extensions are listed, each checked to still be one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import ControlPlane, started, wait_until

from webhook.engine.cel import (
    CelError,
    EvaluationError,
    activation,
    compile_expression,
    evaluate_typed,
)

NAMESPACE = "cel-vs-vap"
PREFIX = "qq-cel-"
# What every ConfigMap holds, so that expressions can read dynamic values from `object`.
DATA = {"space4": " 4", "n": "42", "neg": "-7", "plus": "+4", "micro": "500µs",
        "qq": "qq-", "url": "https://example.com:8443/a/b?x=1&y=2", "mem": "512Mi",
        "cpu": "0.5", "empty": "", "ts": "2024-05-06T07:08:09Z", "word": "héllo wörld",
        "nanos": "2024-05-06T07:08:09.123456789Z", "tenth": "2024-05-06T07:08:09.100Z",
        "off": "2024-01-01T00:00:00.5+01:00"}

CASES = [
    # --- conversions: int, uint, double ---
    "int('42')", "int(' 4')", "int('4 ')", "int('+4')", "int('-4')", "int('04')",
    "int('0x10')", "int('1e3')", "int('')", "int('9223372036854775807')",
    "int('9223372036854775808')", "int(object.data.space4)", "int(object.data.n)",
    "int(object.data.neg)", "int(2.9)", "int(-2.9)", "int(9223372036854775807.0)",
    "int(18446744073709551615u)", "int(5u)", "int(timestamp('2024-01-01T00:00:00Z'))",
    "uint('42')", "uint('+4')", "uint('-0')", "uint(' 4')", "uint(-1)", "uint(2.5)",
    "uint(object.data.plus)",
    "double('1.5')", "double(' 1')", "double('1 ')", "double('1e3')", "double('1e400')",
    "double('0x1p-2')", "double('1_000')", "double('Infinity')", "double('-inf')",
    "double('.5')", "double('5.')", "double(7)", "double(7u)", "double(object.data.n)",
    "string(1.5)", "string(1e20)", "string(0.1)", "string(true)", "string(-0.0)",
    "string(123456789.0)", "string(1e-7)", "string(42u)", "string(b'abc')", "bytes('é')",
    "string(duration('1m'))", "string(duration('1h1m1.5s'))",
    "string(timestamp('2024-01-01T00:00:00Z'))", "dyn(1) == 1.0", "dyn(1u) == 1",
    # --- arithmetic ---
    "1/0", "5 % 0", "-9223372036854775807 - 2", "9223372036854775807 + 1",
    "18446744073709551615u + 1u", "0u - 1u", "7 / -2", "-7 % 3", "2.0 / 0.0",
    "1.0 / 3.0", "[1, 2] == [1, 2.0]", "2.0 == 2",
    # --- literals: Kubernetes' CEL wants their items (keys, values) of one type ---
    "[1, 'a']", "[null, 1]", "[1, dyn(2.0)]", "[object.data, 1]", "[[1], ['a']]",
    "[[], [1]]", "[{}, {'a': 1}]", "[optional.of(1), optional.none()].size()", "[1, 2u]",
    "[?optional.of(1), 2]", "[?optional.of(1), 'a']", "{'a': 1, 'b': 'x'}",
    "{'a': 1, ?'b': optional.of('x')}", "{1: 'a', 'b': 'c'}", "[1, 2].map(x, [x, 'a'])",
    "[dyn(1), dyn('a')]", "[int, string]", "[duration('1s'), timestamp(object.data.ts)]",
    # --- durations and timestamps ---
    "duration('500µs')", "duration('500μs')", "duration('500us')", "duration('1.5h')",
    "duration('.5s')", "duration('0')", "duration('-1s')", "duration('+1s')",
    "duration('1h1m')", "duration('1')", "duration('1d')", "duration('inf')",
    "duration('')", "duration('1S')", "duration(object.data.micro)",
    "duration('1h').getMinutes()", "duration('90m').getHours()",
    "duration('1500ms').getMilliseconds()", "duration('1s') + duration('500ms')",
    "timestamp('2024-01-01T00:00:00Z')", "timestamp('2024-01-01t00:00:00z')",
    "timestamp('2024-01-01T00:00:00.5+01:00')", "timestamp('2024-01-01 00:00:00Z')",
    "timestamp('2024-01-01T00:00:00')", "timestamp('2024-02-30T00:00:00Z')",
    "timestamp(object.data.ts).getFullYear()", "timestamp(object.data.ts).getMonth()",
    "timestamp(object.data.ts).getDayOfYear()", "timestamp(object.data.ts).getHours('+02:00')",
    "timestamp('2024-01-01T00:00:00Z') + duration('36h')",
    "timestamp('2024-03-01T00:00:00Z') - timestamp('2024-02-01T00:00:00Z')",
    "timestamp(object.data.ts) < timestamp('2025-01-01T00:00:00Z')",
    # nanoseconds, and the fraction's zeros trimmed as Go's RFC 3339 writes them
    "string(timestamp('2024-01-01T00:00:00.123456789Z'))", "string(timestamp(object.data.nanos))",
    "string(timestamp('2024-01-01T00:00:00.5Z'))", "string(timestamp(object.data.tenth))",
    "string(timestamp('2024-01-01T00:00:00.000000001Z'))",
    "string(timestamp('2024-01-01T00:00:00.5+01:00'))",
    "string(timestamp(timestamp(object.data.nanos)))", "string(timestamp(object.data.ts))",
    "string(timestamp(object.data.nanos) + duration('1ns'))",
    "'%s'.format([timestamp(object.data.nanos)])", "'%s'.format([[timestamp(object.data.nanos)]])",
    "'%s'.format([timestamp(object.data.tenth)])",
    "'%s'.format([{'at': timestamp(object.data.nanos)}])",
    "'%s'.format([timestamp('2024-01-01T00:00:00.5+01:00')])",
    "'%s'.format([duration('1.000000001s')])", "'%s'.format([[duration('1ns')]])",
    "'%s'.format([timestamp(object.data.nanos) - timestamp(object.data.ts)])",
    "[timestamp(object.data.nanos)].indexOf(timestamp('2024-05-06T07:08:09.123456Z'))",
    "timestamp(object.data.nanos) == timestamp('2024-05-06T07:08:09.123456Z')",
    "timestamp(object.data.nanos).getMilliseconds()",
    "timestamp('2024-01-01T05:00:00+01:00').getHours()",
    "'%s'.format([[[timestamp(object.data.nanos)]]])",
    "string(timestamp('2024-01-01T00:00:00.5+00:00'))",
    "timestamp('2024-01-01T00:00:00.5+01:00') == timestamp('2023-12-31T23:00:00.5Z')",
    "string(timestamp('2024-01-01T00:00:00.123456789Z') - duration('1h'))",
    # a timestamp keeps the offset it was written with: written with it, read in UTC
    "'%s'.format([[timestamp('2024-01-01T00:00:00.5-05:30')]])",
    "'%s'.format([{'at': timestamp('2024-01-01T00:00:00+14:00')}])",
    "string(timestamp('2024-01-01T00:00:00-00:00'))", "string(timestamp(object.data.off))",
    "'%s'.format([timestamp(object.data.off)])", "'%s'.format([{'a': timestamp(object.data.off)}])",
    "string(timestamp(timestamp(object.data.off)))", "string([timestamp(object.data.off)].min())",
    "string(optional.of(timestamp(object.data.off)).value())", "string(timestamp(1704067200))",
    "timestamp(object.data.off) == timestamp('2023-12-31T23:00:00.5Z')",
    "timestamp(object.data.off) < timestamp('2023-12-31T23:00:00.6Z')",
    "[timestamp(object.data.off)].indexOf(timestamp('2023-12-31T23:00:00.5Z'))",
    "timestamp(object.data.off).getFullYear()", "timestamp(object.data.off).getFullYear('+01:00')",
    "timestamp(object.data.off).getHours()", "timestamp(object.data.off).getDate()",
    "timestamp(object.data.off).getDayOfYear()", "timestamp(object.data.off).getMilliseconds()",
    "timestamp(object.data.off).getDayOfWeek('-01:00')", "int(timestamp(object.data.off))",
    "timestamp(object.data.off).getHours('America/New_York')",
    "timestamp(object.data.off).getMinutes('+05:45')", "timestamp(object.data.off).getMonth()",
    "timestamp(object.data.off).getDayOfMonth('+01:00')", "timestamp(object.data.off).getSeconds()",
    "timestamp(object.data.nanos).getMilliseconds('+01:00')",
    "timestamp(object.data.off) - timestamp('2024-01-01T00:00:00Z')",
    "string(timestamp(object.data.off) - timestamp('2024-01-01T00:00:00Z'))",
    "timestamp(object.data.off) + duration('1h') == timestamp('2024-01-01T00:00:00.5Z')",
    "string(timestamp(object.data.ts) + duration('1h'))",
    "'%s'.format([timestamp(object.data.off) - timestamp(object.data.ts)])",
    "string(timestamp('2024-01-01T00:00:00.5+01:00') + duration('1h'))",
    "string(timestamp(object.data.off) + duration('1h'))",
    "string(duration('1h') + timestamp(object.data.off) - duration('30m'))",
    "'%s'.format([[timestamp(object.data.off) - duration('1s'), timestamp(object.data.ts)]])",
    "string([timestamp(object.data.off)].map(t, t + duration('1h'))[0])",
    "string(optional.of(timestamp(object.data.off)).value() + duration('1h'))",
    "string([timestamp(object.data.off), timestamp('2023-12-31T23:00:00.5Z')][1])",
    # nanoseconds kept wherever a value meets Python: the lists library, format, string()
    "[timestamp(object.data.nanos)].lastIndexOf(timestamp(object.data.nanos))",
    "[timestamp(object.data.nanos), timestamp('2024-05-06T07:08:09.123456Z')].min() "
    "== timestamp('2024-05-06T07:08:09.123456Z')",
    "string([timestamp(object.data.nanos), timestamp('2024-05-06T07:08:09.123456Z')].max())",
    "[timestamp('2024-05-06T07:08:09.123456Z'), timestamp(object.data.nanos)].isSorted()",
    "[timestamp(object.data.nanos), timestamp('2024-05-06T07:08:09.123456Z')].isSorted()",
    "[duration('1ns'), duration('2ns')].sum()",
    "string([duration('1ns'), duration('1.000000001s')].sum())",
    "[duration('1.0000005s'), duration('1.0000001s')].min()",
    "string([timestamp(object.data.nanos), timestamp(object.data.ts)].slice(0, 1)[0])",
    "[[timestamp(object.data.nanos)]].indexOf([timestamp('2024-05-06T07:08:09.123456Z')])",
    "'%s'.format([[{'a': duration('1.000000001s')}]])",
    "'%s'.format([[[[timestamp(object.data.nanos)]]]])",
    "string(duration('123456789.123456789s'))", "'%s'.format([duration('123456789.123456789s')])",
    "'%s'.format([[duration('123456789.123456789s')]])",
    "duration('-1.0009999999s').getMilliseconds()", "duration('123456789.123456789s')",
    # --- strings and the strings extension ---
    "'qq-'.substring(0, 3)", "'qq-'.substring(1, 3)", "'qq-'.substring(3)",
    "'qq-'.substring(3, 3)", "'qq-'.substring(0, 4)", "'qq-'.substring(2, 1)",
    "'qq-'.substring(-1)", "object.data.qq.substring(0, 3)", "'héllo'.substring(1, 3)",
    "object.data.word.substring(6)",
    "'abc'.charAt(3)", "'abc'.charAt(4)", "'héllo'.charAt(1)", "'abc'.indexOf('')",
    "'abc'.indexOf('c', 3)", "'abc'.indexOf('a', 4)", "'abc'.lastIndexOf('')",
    "'héllo'.indexOf('l')", "'héllo'.lastIndexOf('l', 2)", "'a,b,,c'.split(',')",
    "'a,b'.split(',', 0)", "'a,b,c'.split(',', 2)", "'abc'.split('')", "'AbC'.lowerAscii()",
    "'ÀbC'.upperAscii()", "' \\t x \\n'.trim()", "['a', 'b'].join('-')", "[].join()",
    "'abc'.reverse()", "'héllo'.reverse()", "strings.quote('a\"b\\n')",
    "'abc'.replace('b', 'x', 0)", "'aaa'.replace('a', 'b', 2)", "'aaa'.replace('', '-')",
    "'%d-%s'.format([1, 'x'])", "'%.2f'.format([1.0 / 3.0])", "'%s'.format([[1, 'a']])",
    "'%x'.format([255])", "'%o'.format([8])", "'%b'.format([5])", "'%e'.format([1234.5])",
    "'%s'.format([{'a': 1}])", "'%d'.format(['x'])", "'%s %s'.format(['x'])",
    "'hello'.startsWith('he')", "'hello'.endsWith('')", "'hello'.contains('ll')",
    "'é'.size()", "size(b'\\xff')", "object.data.word.size()",
    # --- format and string() as Kubernetes writes them (webhook.engine.cel.formatting) ---
    "string(double('Infinity'))", "string(-double('Infinity'))", "string(double('NaN'))",
    "'%s'.format([double('Infinity')])", "'%e'.format([double('Infinity')])",
    "'%s'.format([[double('Infinity')]])", "'%f'.format([-double('Infinity')])",
    "'%e'.format([-double('Infinity')])", "string([1.5, 2.0][0])", "string(dyn(2.5))",
    "string(object.data.n) + string(1.0 / 3.0)",
    "string(duration('1.5ms'))", "string(duration('1ns'))", "string(duration('-1.25s'))",
    "string(duration('0s'))", "string(duration('100h'))", "string(duration('1us'))",
    "string(duration('123456789ns'))", "'%s'.format([['a', 'b']])", "'%s'.format([[1.5, 2.0]])",
    "'%s'.format([[true, null]])", "'%s'.format([[b'ab']])",
    "'%s'.format([[duration('1s'), timestamp('2024-01-01T00:00:00Z')]])",
    "'%s'.format([[[1], ['x']]])", "'%s'.format([[{'a': 'b'}]])",
    "'%s'.format([{'b': 1, 'a': 2}])", "'%s'.format([{'a': 'x', 'b': [1, 'y']}])",
    "'%s'.format([{1: 'a'}])", "'%s'.format([{true: 1.5}])", "'%s'.format([[1u, -2]])",
    "'%s'.format([[1e20, 0.1]])", "'%s'.format([[]])", "'%s'.format([{}])",
    "'%s'.format([{'a': {'b': 'c'}}])", "'%s'.format([['a\"b']])", "'%e'.format([0.0])",
    "'%e'.format([-1.0])", "'%e'.format([1e100])", "'%e'.format([5])",
    "'%.2e'.format([1234.5])", "'%e'.format([1.0 / 3.0])", "'%f'.format([1234.5])",
    "'%.3f'.format([2.0])", "'%s'.format([1.5])", "'%s'.format([1e20])",
    "'%s'.format([duration('1.5s')])", "'%s'.format([timestamp('2024-01-01T00:00:00.5Z')])",
    "'%d'.format([5u])", "'%s'.format([b'ab'])", "'%s'.format([null])",
    "'%s'.format([type(1)])", "'%x'.format(['hi'])", "'%X'.format([255])",
    "'%s'.format([{'a': null}])", "'%s'.format([[null]])", "'%s'.format([{'k': [1.5]}])",
    "'%.2f'.format([1234.5])", "'%.0f'.format([1234.5])", "'%f'.format([1e20])",
    "'%f'.format([-1234567.125])", "'%f'.format([0.5])", "'%f'.format([5])",
    "'%d'.format([2.5])", "'%f'.format([double('NaN')])", "'%f'.format([double('Infinity')])",
    "'%e'.format([double('NaN')])", "'%e'.format([-1e-300])", "'%e'.format([999999.9999999])",
    "'%e'.format([1.5e-7])", "'%.3e'.format([1.5e-7])",
    "'%s'.format([[double('NaN'), double('-Infinity')]])", "'%s'.format([double('NaN')])",
    "'%s'.format([-0.0])", "'%s'.format([[-0.0]])", "'%s'.format([[1e-7]])",
    "'%s'.format([[123456789.125]])", "'%x'.format([-255])", "'%x'.format([b'\\xff\\x00'])",
    "'%x'.format([2.5])", "'%X'.format(['hi'])", "'%o'.format([8u])", "'%o'.format([-8])",
    "'%b'.format([-5])", "'%b'.format([true])", "'%d'.format([true])", "'%s'.format([5u])",
    "'%s'.format([[5u]])", "'%s'.format([{10: 'a', 9: 'b'}])",
    "'%s'.format([{false: 1, true: 2}])", "'%s'.format([{'b\"': 1, 'a': 2}])",
    "'%s'.format([{1u: 'a'}])", "'%s'.format([{'a': b'x'}])",
    "'%s'.format([{'a': duration('90s')}])", "'%10d'.format([5])", "'%.2s'.format(['abc'])",
    "'%s %d %f'.format(['a', 1, 1.5])", "'%'.format([])", "'%z'.format([1])",
    "'%s'.format([1, 2])", "'%%'.format([])", "'%d'.format([-9223372036854775807])",
    "'%f'.format([1000.0])", "'%f'.format([999.5])", "'%.1f'.format([0.05])",
    "'%.1f'.format([0.25])", "'%f'.format([123456.0])", "'%e'.format([123456.0])",
    "'%s'.format([['é\\u0001\\t']])", "'%s'.format([[duration('1.5ms'), duration('-90m')]])",
    "'%s'.format([[timestamp('2024-01-01T00:00:00.123456789Z')]])",
    "'%s'.format([duration('-1.25s')])", "'%s'.format([[type(1), type('a')]])",
    "'%f'.format([-0.0])", "'%e'.format([-0.0])", "'%.1f'.format([-0.01])", "'%f'.format(['NaN'])",
    "'%e'.format(['-Infinity'])", "'%f'.format(['x'])", "'%s'.format([b'\\xff'])",
    "'%s'.format([[b'\\xff']])", "'%s'.format([b'\\xc3\\xa9'])", "'%.20f'.format([0.1])",
    "'%f'.format([1e300])", "'%.2f'.format([2.675])", "'%.0f'.format([2.5])",
    "'%x'.format([18446744073709551615u])", "'%X'.format([-1])", "'%x'.format(['héllo'])",
    "'%s'.format([['\\u00e9\\u2028']])", "'%s'.format([[1.0, -1.5, 1e21, 1e-7]])",
    "'%.3s'.format(['abcdef'])", "'%c'.format([65])", "'%5s'.format(['a'])", "'%%s'.format(['a'])",
    "'a%'.format([])", "'%s'.format([])",
    # the strings extension on empty and unicode input, out of range
    "''.split('')", "'😀a'.charAt(1)", "'héllo'.charAt(6)", "'a😀a'.lastIndexOf('😀')",
    "'abc'.lastIndexOf('', 4)", "'abc'.indexOf('', 4)", "'Straße'.upperAscii()",
    "' \\u00a0x\\u2003 '.trim()", "'\\u200bx'.trim()", "'\\u0085x\\u0085'.trim()",
    "'a,b,c'.split(',', -2)", "'aaa'.replace('', 'x', 2)", "'😀ab'.substring(1)",
    "strings.quote('\\u0000')", "strings.quote('\\u2028')", "strings.quote('\\x7f')",
    "strings.quote('\\t\\r\\n\\v\\f\\b\\a')", "strings.quote('\\ufffd')",
    "strings.quote('\\u00ad')", "strings.quote('😀')", "[1, 2].join(',')", "'abc'.substring(-1, 2)",
    # --- regular expressions ---
    "'abc'.matches('^a')", "'abc'.matches('b')", "'ab'.matches('(')",
    "'x1y22'.find('[0-9]+')", "'x1y22'.findAll('[0-9]+')", "'x1y22'.findAll('[0-9]+', 1)",
    "'abc'.find('z')", "'aaa'.matches('(a+)+$')", "'Ab'.matches('(?i)ab')",
    "'a\\nb'.matches('^b$')", "'é'.matches('^.$')",
    # --- lists and maps ---
    "[1, 2, 3].exists_one(x, x > 1)", "[1, 2, 3].all(x, x > 0)", "[3, 1, 2].isSorted()",
    "[1, 2, 3].sum()", "[1.5, 2.0].sum()", "[].sum()", "[3, 1, 2].min()", "[].max()",
    "['b', 'a'].max()", "[1, 2, 3].indexOf(2)", "[1, 2, 2].lastIndexOf(2)",
    "[1, 2, 3].slice(1, 3)", "[1, 2, 3].slice(2, 4)", "[1, 2, 3].indexOf(5)",
    "['a', 'b'].lastIndexOf('b')", "[[1], [2]].indexOf([2])", "'abcabc'.lastIndexOf('bc')",
    "'abc'.indexOf('', 2)", "'abc'.lastIndexOf('c', 1)", "[1, [2, 3]].flatten()",
    "''.lastIndexOf('/')", "''.indexOf('/')", "''.lastIndexOf('')",
    "[1, 2, 3].map(x, x * 2)",
    # Kubernetes' lists library: its overloads, the type of a sum, a list of dyn by its items
    "[1u, 2u].sum()", "[dyn(1u), dyn(2u)].sum()", "[1u].filter(x, false).sum()",
    "[1.5].filter(x, false).sum()", "[duration('1s')].filter(x, false).sum()",
    "[1].filter(x, false).sum()", "dyn([]).sum()", "[-0.0].sum()",
    "object.data.map(k, 1u).filter(x, false).sum()", "object.data.map(k, 1u).sum()",
    "[9223372036854775807, 1, -1].sum()", "[18446744073709551615u, 1u].sum()",
    "[dyn(1), dyn(2u)].sum()", "[dyn(1.5), dyn(1)].sum()", "[dyn('a')].sum()",
    "string([dyn(duration('1s')), dyn(timestamp(object.data.off))].sum())",
    "[dyn(duration('0.000000001s')), dyn(timestamp(object.data.off))].sum()",
    "['a'].sum()", "[true].sum()", "[timestamp(0)].sum()", "[[1, 2]].sum()", "[null].sum()",
    "[1u, 2u].sum() + 1", "[1, 2].sum() == 'a'", "type([1u].sum()) == uint",
    "[[1]].min()", "[{'a': 1}].max()", "[null].min()", "[1u].filter(x, false).max()",
    "[dyn(1), dyn('a')].min()", "[dyn('a'), dyn(1)].max()", "[dyn([1])].min()",
    "[1.0, double('NaN'), 0.5].min()", "[dyn(9007199254740993), dyn(9007199254740992.0)].min()",
    "[b'a', b'b'].max()", "[true, false].min()", "[3, 1].min() == 'a'", "[1u, 3u].max()",
    "[[1]].isSorted()", "[null].isSorted()", "[dyn(2), dyn('a'), dyn(1)].isSorted()",
    "[dyn(2), dyn(1), dyn([1])].isSorted()", "[dyn(1), dyn([1])].isSorted()",
    "[true, false].isSorted()", "[b'b', b'a'].isSorted()", "[].isSorted()",
    "[1].indexOf('a')", "[1].lastIndexOf(1.0)", "[[1]].indexOf(['a'])", "[1].indexOf(dyn(1.0))",
    "[1, 2].slice(0, 1) == ['a']", "[1, 2, 3].slice(0, 0)", "['a', 'b'].slice(1, 2)",
    "[[1], [2]].indexOf([2.0])", "[1.0].indexOf(1)", "[dyn(1), dyn(1u)].lastIndexOf(1.0)",
    "[dyn(duration('1s')), dyn(timestamp(0)), dyn(duration('1s'))].sum()",
    "[dyn(timestamp(0)), dyn(duration('1s'))].sum()", "[dyn(3.0), dyn(2u), dyn(1)].max()",
    "[b'\\x00', b''].min()", "[dyn(2u), dyn(1)].sum()", "dyn('abc').slice(0, 1)",
    "[1, 2, 3].filter(x, x % 2 == 1)", "[1, 2, 3].map(x, x > 1, x * 10)",
    "{'a': 1, 'b': 2}.all(k, k in ['a', 'b'])", "{'a': 1}.exists(k, k == 'a')",
    "size({'a': 1, 'b': 2})",
    "'a' in {'a': 1}", "2 in [1, 2]", "[1, 2] + [3]", "{'a': 1}['b']", "[1][1]",
    "object.data.map(k, k).size()", "has(object.data.n)", "has(object.data.none)",
    "object.data.none", "[1, 2, 3][1u]", "{1: 'a'}[1.0]", "{1u: 'a'}[1]",
    # --- optionals ---
    "{'a': 1}.?b.orValue(5)", "{'a': 1}.?a.orValue(5)", "optional.of(1).hasValue()",
    "optional.none().hasValue()", "object.data.?none.orValue('d')",
    "object.data.?n.value()", "[1, 2].?[5].orValue(0)", "optional.ofNonZeroValue('').hasValue()",
    "optional.of(1).or(optional.of(2)).value()", "optional.none().value()",
    "{?'a': optional.of(1), ?'b': optional.none()}", "[?optional.none(), ?optional.of(2)]",
    "optional.unwrap([optional.of(1), optional.none()])", "optional.unwrap([dyn(1)])",
    "[optional.of(1), optional.none(), optional.of(3)].unwrapOpt()", "[1].unwrapOpt()",
    "optional.ofNonZeroValue(timestamp(0)).hasValue()", "[1, 2].first().value()",
    "optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')).hasValue()",
    "optional.ofNonZeroValue(-0.0).hasValue()", "optional.ofNonZeroValue(b'').hasValue()",
    "optional.ofNonZeroValue(duration('0s')).hasValue()", "[].last().hasValue()",
    "optional.of(1).optMap(x, x + 1).value()", "optional.none().optMap(x, x + 1).hasValue()",
    "optional.of(1).optFlatMap(x, optional.of(x * 2)).value()", "[1, 2][?-1].hasValue()",
    "[1, 2][?1u].value()", "{1: 'a'}[?1.0].value()", "optional.of(1) == optional.of(1.0)",
    "type(optional.none()) == optional_type", "dyn(optional.none()).hasValue()",
    # an optional held in a value of dyn, near format() (quickq-guard refuses it: REFUSED_HERE)
    "'%s'.format([{'a': 1, 'b': optional.none()}])", "'%s'.format([[dyn(optional.none())]])",
    "[dyn(optional.none())].min()", "[dyn(optional.of(1))].sum()",
    # --- quantities ---
    "quantity('0.5').isLessThan(quantity('1'))", "quantity('1Gi') == quantity('1024Mi')",
    "quantity('1Gi').compareTo(quantity('1G'))", "quantity(object.data.mem).asInteger()",
    "quantity(object.data.cpu).asApproximateFloat()", "quantity('1.5').isInteger()",
    "quantity('500m').add(quantity('500m')).isInteger()", "isQuantity('1.5Gi')",
    "isQuantity('1.5.5')", "isQuantity('')", "isQuantity(' 1')", "quantity('1e3').asInteger()",
    "quantity('-1').sign()", "quantity('1k').sub(1).asInteger()", "quantity('x')",
    "quantity('1000m').isInteger()", "quantity('1.0').isInteger()", "quantity('0.5Gi').asInteger()",
    "quantity(object.data.cpu).add(quantity('1')).isInteger()", "quantity('2').add(1).isInteger()",
    "quantity(object.data.mem).isInteger()", "quantity('9223372036854775808').isInteger()",
    "[optional.of(1)].sum()", "'%s'.format([optional.of(1)])",
    "quantity('1Ki').asInteger()", "quantity('9223372036854775807').add(1).asInteger()",
    "isQuantity('1Ei')", "isQuantity('1E')", "quantity('1E').isGreaterThan(quantity('1P'))",
    "quantity('1.5n') == quantity('2n')", "quantity('1e-1000').isGreaterThan(quantity('0'))",
    "quantity('16Ei').compareTo(quantity('9223372036854775807'))", "isQuantity('1Zi')",
    "quantity('1Gi').compareTo(quantity('1Ei'))", "isQuantity('5.')", "isQuantity('1e+3')",
    # how Kubernetes keeps a quantity: digits and a power of ten in an int64, else an inf.Dec
    "quantity('9223372036854775807').asInteger()", "quantity('1Pi').isInteger()",
    "quantity('-9223372036854775808').asInteger()", "quantity('1Ti').isInteger()",
    "quantity('0.1').add(quantity('0.2')).asApproximateFloat()",
    "quantity('0.3').asApproximateFloat()",
    "quantity('99999999999999999999999999999999999999').asApproximateFloat()",
    "quantity('300m').asApproximateFloat()", "quantity('1e-1000').asApproximateFloat()",
    "quantity('1.5Gi').asApproximateFloat()", "quantity('1e1000').asApproximateFloat()",
    "quantity('1.0000000000000000000000000001') == quantity('1000000001n')",
    "quantity('99999999999999999999999999999999999999') == quantity('1e38')",
    # --- URLs ---
    "url(object.data.url).getHost()", "url(object.data.url).getHostname()",
    "url(object.data.url).getPort()", "url(object.data.url).getScheme()",
    "url(object.data.url).getEscapedPath()", "url(object.data.url).getQuery()",
    "url('https://[::1]:80/').getHostname()", "url('/path').getHost()",
    "url('https://a.example/%20x').getEscapedPath()", "url('relative/path')",
    "isURL('mailto:a@example.com')", "isURL('https://')", "isURL('https://a b.example/')",
    "isURL('/abs')", "isURL('rel')", "isURL('http://x:port/')", "isURL('http://%zz/')",
    "url('https://[::1%25eth0]:80/p').getHostname()",
    "url('http://[fe80::1%25en0]:8/').getHost()",
    "url('https://example.com/a b').getEscapedPath()", "url('https://example.com/ü').getEscapedPath()",
    "url('https://example.com/?a;b=1').getQuery()", "url('https://example.com/?q=%zz').getQuery()",
    "url('https://a.example/?a=1&&b=2').getQuery()", "url('https://a.example/?a+b=c+d').getQuery()",
    "url('mailto:a@example.com').getScheme()", "url('mailto:a@example.com').getEscapedPath()",
    "url('https://example.com:99999/').getPort()", "url('https://a%C3%A9.example/').getHost()",
    "url('HTTPS://Example.COM/') == url('https://Example.COM/')", "url('*').getEscapedPath()",
    "url('https://a.example/a b') == url('https://a.example/a%20b')", "isURL('https://[1.2.3.4]/')",
    "url('https://a.example/?') == url('https://a.example/')", "isURL('ftp://a:b:80/')",
    "url('ftp://a:b:80/').getHostname()", "url('https://a.example/a%2fb').getEscapedPath()",
    "isURL('https://[fe80::1%25en0]/')", "isURL('https://a%41.example/')", "isURL('http:x')",
    # Go's strings.Split and SplitN
    "''.split('', 2)", "''.split('', -1)", "'abc'.split('', 2)",
    # --- IPs and CIDRs ---
    "ip('10.0.0.1').family()", "isIP('::ffff:10.0.0.1')", "isIP('10.0.0.01')",
    "cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))",
    "isCIDR('10.0.0.0/33')", "ip('::1').isLoopback()", "ip.isCanonical('2001:db8::0:1')",
    "string(cidr('10.0.0.1/8').masked())", "double('1_000') == 1000.0",
    "ip('ff12::1').isLinkLocalMulticast()", "ip('ff05::1').isLinkLocalMulticast()",
    "cidr('10.0.0.0/8').containsIP('10.0.0.1/32')", "isCIDR('1.2.3.4/08')",
    "isCIDR('1.2.3.4/0')", "cidr('0.0.0.0/0').containsIP('::1')", "isIP('::1.2.3.4')",
    "string(ip('::1.2.3.4'))", "ip.isCanonical('2001:0db8::1')",
    "ip('240.0.0.1').isGlobalUnicast()", "cidr('10.0.0.0/8').containsCIDR('10.0.0.0/7')",
    "ip('::ffff:127.0.0.1').isLoopback()",
    # regular expressions as Go's regexp: successive matches, its syntax
    "'aaa'.findAll('a*')", "'abc'.findAll('$')", "'abc'.findAll('')", "'aaa'.findAll('a??')",
    "'abab'.findAll('ab', 0)", "'a😀b'.findAll('.')", "'abc'.matches('\\\\C')",
    "'abc'.find('\\\\C')", "'abc'.matches(object.data.n + '\\\\C')", "'xyz'.find('[')",
    "'abc'.matches('a{2,1}')", "'١٢٣'.matches('^\\\\d+$')", "'abc'.find('(?P<x>b)')",
    # --- macros and misc ---
    "cel.bind(x, 2, x * x)", "[1, 2, 3].exists(x, x == 2) ? 'y' : 'n'",
    "type(1) == int", "type('a') == string", "type(1u) == uint", "type([]) == list",
    "null == null", "{'a': null}.a == null", "base64.encode(b'hi')",
    "string(base64.decode('aGk='))", "math.greatest(1, 2)", "math.least([3, 1])",
    "math.ceil(1.2)", "math.abs(-3)", "math.bitOr(1, 2)", "math.isNaN(0.0 / 0.0)",
    "math.round(-1.5)", "math.sqrt(4)", "int('1') + 1 == 2 && 'a' < 'b'",
]


# quickq-guard's CEL is Kubernetes' own (the Go library, webhook/engine/cel/kubecel), so every
# case must agree: there are no extensions (cel.bind, math, base64, reverse() of a string,
# sign() of a quantity are refused at load, as the API server refuses them), nothing refused
# here alone (the earlier runtime's quantity scales, nesting limits and optionals in format())
# and nothing failing here alone (timestamps keep their offsets in the library).
# The differences left, each as the API server shows it (a fix makes its case agree, and the
# test then says to take it off this list).
KNOWN: dict[str, str] = {}


# --- the engine's side ----------------------------------------------------------------------


def configmap(index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"c{index:03d}", "namespace": NAMESPACE}, "data": DATA}


Typed = tuple[str, Any]  # (CEL type name, the value as JSON data), as evaluate_typed gives


def engine(expression: str) -> tuple[str, Any]:
    """('value', (type, value)), ('error', why) or ('compile', why)."""
    try:
        compiled = compile_expression(expression, "object")
    except CelError as error:
        return "compile", str(error)
    bound = activation("object", {"object": configmap(0)})
    try:
        return "value", evaluate_typed(compiled, bound)
    except EvaluationError as error:
        return "error", str(error)


def literal(value: Typed) -> str:
    """A CEL literal equal to a value the library gave. Inside a list or map a double that
    is whole reads back as an int: CEL's equality of numbers of different types holds them
    equal, as the API server compares them."""
    kind, plain = value
    if kind == "bool" or isinstance(plain, bool):
        return "true" if plain else "false"
    if kind == "null" or plain is None:
        return "null"
    if kind == "uint":
        return f"{plain}u"
    if kind == "double":
        return f"double('{plain!r}')".replace("inf", "Infinity") \
            if not isinstance(plain, str) else f"double('{plain}')"
    if kind == "duration":
        return f"duration('{plain}')"
    if kind == "timestamp":
        return f"timestamp('{plain}')"
    if kind == "type":
        return str(plain)
    if isinstance(plain, int):
        return str(plain)
    if isinstance(plain, float):
        return f"double('{plain!r}')"
    if isinstance(plain, str):
        return json.dumps(plain, ensure_ascii=False)
    if isinstance(plain, list):
        return "[" + ", ".join(f"dyn({literal(('', item))})" for item in plain) + "]"
    if isinstance(plain, dict):
        return "{" + ", ".join(f"dyn({json.dumps(k)}): dyn({literal(('', v))})"
                               for k, v in plain.items()) + "}"
    raise AssertionError(f"no literal for a {kind}")


_TYPES = {"bool": "bool", "int": "int", "uint": "uint", "double": "double", "string": "string",
          "bytes": "bytes", "null": "null_type", "duration": "google.protobuf.Duration",
          "timestamp": "google.protobuf.Timestamp", "list": "list", "map": "map", "type": "type"}


def validation(expression: str, value: Typed) -> str:
    """The VAP validation that holds when the server's value of `expression` is `value` (of
    bytes and optionals, whose JSON form loses them, only the type)."""
    kind, plain = value
    if kind == "double" and plain == "NaN":
        return f"type({expression}) == double && ({expression}) != ({expression})"
    if kind == "bytes":
        return f"type({expression}) == bytes"
    if kind == "optional":
        return f"({expression}).hasValue() == {literal(('bool', plain is not None))}"
    if kind == "duration":  # its JSON form is string()'s, seconds as a double, in both
        return f"type({expression}) == {_TYPES[kind]} && string({expression}) == '{plain}'"
    if kind in ("list", "map"):  # items of the type the literal's dyn() leaves to run time
        return (f"type({expression}) == {_TYPES[kind]} && "
                f"dyn({expression}) == dyn({literal(value)})")
    return f"type({expression}) == {_TYPES[kind]} && ({expression}) == {literal(value)}"


def policy(index: int, expression: str, check: str, read_back: bool) -> list[dict[str, Any]]:
    """The case's policy and binding; `read_back`: a denial says the server's value (only
    for a scalar: the server refuses a policy whose messageExpression fails on constants)."""
    name = f"{PREFIX}{index:03d}"
    rule: dict[str, Any] = {"expression": check, "message": "qq-mismatch"}
    if read_back:
        rule["messageExpression"] = f"'qq-mismatch: ' + string({expression})"
    return [{
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            # by name in its rule, not a matchCondition: the API server then looks at each
            # ConfigMap's policy only, not at every one of the ~550 policies
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"], "resourceNames": [f"c{index:03d}"]}]},
            "validations": [rule],
        }}, {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": NAMESPACE}}}}}]


# --- the server's side ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cel_plane(plane: ControlPlane,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server of its own: its admission policies would deny other tests' objects."""
    with started(plane.assets, tmp_path_factory.mktemp("cel-vs-vap"), NAMESPACE) as own:
        yield own


_FORBIDDEN = re.compile(r'configmaps "(c\d{3})" is forbidden: ValidatingAdmissionPolicy '
                        r"'[^']+' with binding '[^']+' denied request: (.*?)"
                        r'(?=\nError from server|\Z)', re.S)
_REFUSED_POLICY = re.compile(r'validatingadmissionpolic(?:y|ies)[^"]*"' + PREFIX +
                             r'(\d{3})" is invalid: (.*?)(?=\nThe |\nError from server|\Z)',
                             re.S | re.I)


def server_verdicts(plane: ControlPlane, checks: dict[int, tuple[str, bool]]) -> tuple[
        dict[int, str], dict[int, str]]:
    """(case -> what the server said when it denied the case's ConfigMap, case -> why it
    refused the case's policy)."""
    objects = [doc for index, (check, read_back) in checks.items()
               for doc in policy(index, CASES[index], check, read_back)]
    created = plane.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": objects}), check=False)
    refused = {int(index): why.strip() for index, why in
               _REFUSED_POLICY.findall(created.stderr)}
    probe = len(CASES)
    plane.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": policy(probe, "false", "false", False)}))

    def create_all() -> str:
        maps = [configmap(index) for index in [*checks, probe]]
        done = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": maps}), check=False)
        return done.stderr

    # The policies take effect when the API server's informer has them (the probe last).
    wait_until(lambda: f'"c{probe:03d}" is forbidden' in create_all(),
               what="the admission policies to be in force")
    denied = {int(name[1:]): message.strip()
              for name, message in _FORBIDDEN.findall(create_all())}
    denied.pop(probe, None)
    return denied, refused


def test_our_cel_and_the_api_servers_agree_on_every_expression(
        cel_plane: ControlPlane) -> None:
    ours = {index: engine(expression) for index, expression in enumerate(CASES)}
    checks = {}
    for index, (outcome, value) in ours.items():
        if outcome == "value":
            checks[index] = (validation(CASES[index], value),
                             value[0] not in ("list", "map", "bytes", "optional"))
        elif outcome == "error":
            checks[index] = (f"[{CASES[index]}].size() == 0", False)
        else:
            # the server must refuse to compile it (a bool, so that is the only reason)
            checks[index] = (f"[{CASES[index]}].size() == 1", False)
    denied, refused = server_verdicts(cel_plane, checks)
    differences = []
    for index, (outcome, value) in ours.items():
        said = denied.get(index, "")
        if index in refused:
            # The API server evaluates calls on constants when it creates the policy: an
            # expression that fails on them is refused then, not when it runs.
            server = f"refused the policy: {refused[index][:300]}"
            missing = "undeclared reference" in refused[index] or \
                "found no matching overload" in refused[index]
            agree = outcome == "compile" or (outcome == "error" and not missing)
        elif outcome == "value":
            server = said or "the same value"
            agree = not said
        elif outcome == "error":
            server = said or "a value"
            agree = "resulted in error" in said
        else:
            server = f"accepted the policy, then: {said or 'allowed'}"
            agree = False
        ours_said = literal(value) if outcome == "value" else f"{outcome}: {value}"
        line = f"{CASES[index]}: quickq-guard {ours_said[:200]}; the API server {server}"
        if CASES[index] in KNOWN:
            if agree:
                differences.append(f"{CASES[index]}: agrees now; take it off KNOWN")
        elif not agree:
            differences.append(line)
    assert not differences, f"{len(differences)} of {len(CASES)} differ:\n" + \
        "\n".join(differences)
