"""Loop names are made and read in one place (schedules/loopnest.py), by their structure: an original
loop may itself be named `outer`, `inner` or `fused` (legal axis names)."""

from __future__ import annotations

import pytest

from ptowsp.schedules.loopnest import fused_of, inner_of, is_outer_part, outer_of, renamed, roots_of


@pytest.mark.parametrize("name, roots, outer", [
    ("i", ("i",), False),
    (outer_of("i"), ("i",), True),
    (outer_of(inner_of("j")), ("j",), True),
    (fused_of("a", "b"), ("a", "b"), False),
    (fused_of(outer_of("a"), "b"), ("a", "b"), False),
    (inner_of("outer"), ("outer",), False),  # the inner part of a loop named outer
    (outer_of("inner"), ("inner",), True),
    (fused_of("a", "outer"), ("a", "outer"), False),
    (inner_of(fused_of(fused_of("x", "y"), "fused")), ("x", "y", "fused"), False),
])
def test_a_name_says_which_original_loops_it_iterates(name, roots, outer):
    assert roots_of(name) == roots
    assert is_outer_part(name) is outer


def test_renaming_touches_the_original_loops_only():
    names = {"outer": "p", "inner": "q", "i": "r"}
    assert renamed(outer_of(inner_of("outer")), names) == outer_of(inner_of("p"))
    assert renamed(fused_of(outer_of("i"), "inner"), names) == fused_of(outer_of("r"), "q")
    assert renamed(inner_of("k"), names) == inner_of("k")


def test_what_is_no_loop_name_is_a_value_error():
    with pytest.raises(ValueError, match="is not a loop name"):
        roots_of("a.b")
