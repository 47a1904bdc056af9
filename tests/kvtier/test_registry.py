"""The one registry every pluggable part is chosen from: names in order, lazy factories, errors that list the names."""

import fractions
import sys

import pytest

from kvtier import EVICTION_POLICIES
from kvtier.eviction.next_use import NextUsePolicy
from kvtier.registry import Registry
from liveserve.admission import ADMISSION_GATES
from stages.policies import SCHEDULING_POLICIES
from stages.policies.fcfs import FCFSParams, FCFSPolicy
from stages.policies.urgency import UrgencyParams


def test_a_registry_makes_what_a_name_was_registered_with_importing_it_only_then():
    parts = Registry("part")
    parts.add("fraction", "fractions:Fraction", params="fractions:Fraction")
    parts.add("from_float", "fractions:Fraction.from_float")
    parts.add("missing", "liveserve_no_such_module:Part")  # nothing is imported when a name is added
    parts.add("nothing", None)
    assert parts.names() == ("fraction", "from_float", "missing", "nothing")
    assert parts.make("fraction", 3, 4) == fractions.Fraction(3, 4)
    assert parts.make("from_float", 0.5) == fractions.Fraction(1, 2)  # a dotted attribute
    assert parts.params("fraction") is fractions.Fraction and parts.params("from_float") is None
    assert parts.make("nothing") is None
    assert "liveserve_no_such_module" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        parts.make("missing")


def test_an_unknown_or_repeated_name_is_a_value_error_that_lists_the_names():
    parts = Registry("widget policy")
    parts.add("a", "fractions:Fraction")
    parts.add("b", None)
    for ask in (parts.make, parts.params, parts.check):
        with pytest.raises(ValueError, match=r"^unknown widget policy 'c'; choose from \['a', 'b'\]$"):
            ask("c")
    parts.check("b")
    with pytest.raises(ValueError, match="widget policy 'a' is registered already"):
        parts.add("a", None)


def test_the_three_pluggable_kinds_use_it():
    assert EVICTION_POLICIES.names() == ("none", "lru", "next_use")
    assert EVICTION_POLICIES.make("none") is None and isinstance(EVICTION_POLICIES.make("next_use"), NextUsePolicy)
    assert SCHEDULING_POLICIES.names() == ("fcfs", "urgency")
    assert (SCHEDULING_POLICIES.params("fcfs"), SCHEDULING_POLICIES.params("urgency")) == (FCFSParams, UrgencyParams)
    assert isinstance(SCHEDULING_POLICIES.make("fcfs", FCFSParams()), FCFSPolicy)
    assert ADMISSION_GATES.names() == ("fixed", "aimd")
    with pytest.raises(ValueError, match=r"unknown admission policy 'pid'; choose from \['fixed', 'aimd'\]"):
        ADMISSION_GATES.make("pid")
