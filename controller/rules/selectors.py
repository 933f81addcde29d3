"""metav1.LabelSelector matching (apimachinery ``metav1.LabelSelectorAsSelector`` semantics).

Used for the zone's ``namespaceSelector`` (reference-behaviour.md §5.3): nil admits every
namespace; a selector that cannot be converted admits none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class InvalidSelector(ValueError):
    """The selector cannot be converted (unknown operator, bad values)."""


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy ``selector``; None matches everything.

    An empty selector ``{}`` matches everything too (apimachinery: ``labels.Everything``).
    :raises InvalidSelector: for an operator other than In, NotIn, Exists, DoesNotExist,
        In/NotIn without values, or Exists/DoesNotExist with values.
    """
    if selector is None:
        return True
    if not isinstance(selector, Mapping):
        raise InvalidSelector("selector is not an object")
    ml = selector.get("matchLabels") or {}
    if not isinstance(ml, Mapping):
        raise InvalidSelector("matchLabels is not a map")
    for k, v in ml.items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, Mapping):
            raise InvalidSelector("matchExpressions entry is not an object")
        key = expr.get("key")
        op = expr.get("operator")
        values = expr.get("values") or []
        if not key:
            raise InvalidSelector("matchExpressions entry has no key")
        if op in ("In", "NotIn"):
            if not values:
                raise InvalidSelector(f"operator {op} needs values")
            present = key in labels
            if op == "In" and not (present and labels[key] in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise InvalidSelector(f"operator {op} takes no values")
            if (op == "Exists") != (key in labels):
                return False
        else:
            raise InvalidSelector(f"unknown operator {op!r}")
    return True
