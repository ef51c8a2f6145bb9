"""A tool call's arguments checked against the conversation with no model (issue 73, point 1): each kind
of literal normalised on both sides, the schema's enum and default, phrases by their content words, lists
and objects value by value, and a missing value told from an invented one, worked by hand; and BFCL's
cases, whose labels hold by construction."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from halluscope.bench.bfcl import cases, load_bfcl, stated
from halluscope.scoring.arguments import Conversation, check_arguments, kind_of, url_key

SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "quantity": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "fahrenheit"},
        "notify": {"type": "boolean"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    },
}


def checked(arguments: dict, texts: list[str]) -> dict[str, tuple[bool | None, str]]:
    return {c.path: (c.grounded, c.reason) for c in check_arguments(arguments, SCHEMA, texts)}


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (7890, "number"),
        ("1,000", "number"),
        (True, "boolean"),
        ("ana@example.org", "email"),
        ("https://example.org/a", "url"),
        ("2024-03-05", "date"),
        ("March 5, 2024", "date"),
        ("ORD-1234", "identifier"),
        ("Tel Aviv", "phrase"),
    ],
)
def test_a_value_is_read_as_its_kind(value: object, kind: str) -> None:
    assert kind_of(value) == kind


def test_each_literal_is_found_after_normalising_both_sides() -> None:
    said = ["Please send 1,000 units of order ORD-1234 to Ana@Example.org by 5 March 2024; see www.example.org/a/."]
    found = checked(
        {"order_id": "ord-1234", "quantity": 1000, "email": "ana@example.org", "due": "2024-03-05",
         "link": "https://example.org/a"},
        said,
    )  # fmt: skip
    assert all(grounded for grounded, _ in found.values()), found
    assert Conversation.of(said).literals["date"] == {dt.date(2024, 3, 5)}
    assert Conversation.of(["twelve eggs and 2.50 dollars"]).literals["number"] == {Decimal(12), Decimal("2.5")}
    assert url_key("HTTPS://www.Example.org/Path/") == "example.org/Path"


def test_the_schema_grounds_its_own_values_and_a_flag_is_not_checked() -> None:
    found = checked({"unit": "celsius", "notify": True}, ["What is the weather in Paris?"])
    assert found == {
        "unit": (True, "one of the schema's values"),
        "notify": (None, "a flag states no value: not checked"),
    }


def test_a_value_found_nowhere_is_missing_or_invented() -> None:
    said = ["Cancel my order ORD-1234, I bought 2 of them."]
    found = checked({"order_id": "ORD-9876", "quantity": 3, "email": "bob@example.org"}, said)
    assert found["order_id"] == (False, "invented: the conversation states other identifiers, not this one")
    assert found["quantity"] == (False, "invented: the conversation states other numbers, not this one")
    assert found["email"] == (False, "missing: the conversation states no email at all")


def test_a_phrase_is_grounded_by_its_content_words_and_lists_value_by_value() -> None:
    said = ["Find flights to Tel Aviv for me, items A7X and B8Y."]
    found = checked({"city": "Tel Aviv", "place": "Tel Aviv, Israel", "items": [{"sku": "A7X"}, {"sku": "C9Z"}]}, said)
    assert found["city"] == (True, "every word of it is in the conversation")
    assert found["place"] == (False, "not in the conversation: israel")
    assert found["items[0].sku"][0] is True and found["items[1].sku"][0] is False
    assert checked({"order_id": ""}, said) == {}  # an empty value states nothing


def test_a_time_is_read_on_a_24_hour_clock_whichever_way_it_is_written() -> None:
    assert Conversation.of(["at 2pm, or 2:30 p.m., else 14:45 or noon"]).literals["time"] == {
        (14, 0), (14, 30), (14, 45), (12, 0)
    }  # fmt: skip
    assert checked({"departure": "14:00"}, ["Leave at 2 PM please."])["departure"][0] is True
    assert checked({"departure": "15:00"}, ["Leave at 2 PM please."])["departure"][0] is False


def test_lenient_lets_through_a_qualifier_and_a_date_given_against_today() -> None:
    said = ["Book a table in Tel Aviv for tomorrow."]
    strict = check_arguments({"city": "Tel Aviv, Israel", "date": "2024-03-06", "town": "Haifa, Israel"}, None, said)
    lenient = check_arguments({"city": "Tel Aviv, Israel", "date": "2024-03-06", "town": "Haifa, Israel"}, None, said,
                              lenient=True)  # fmt: skip
    assert [c.grounded for c in strict] == [False, False, False]
    assert [c.grounded for c in lenient] == [True, None, False]  # Haifa itself is stated nowhere
    assert lenient[0].reason.endswith("(lenient)") and lenient[1].reason.startswith("the conversation gives a day")


def test_bfcls_cases_hold_their_labels_by_construction(data_dir: Path) -> None:
    """Each changed case differs from its request's ground truth in one argument: a replaced value that
    the request states in no form, or a value whose words were taken out of the request; labels that
    rest on the construction alone, not on the check."""
    requests = load_bfcl(data_dir, ("live_simple",))
    assert len(requests) == 258 and requests[0].arguments == {"user_id": 7890, "special": "black"}
    made = cases(requests)
    truth = {c.id: c for c in made if c.construction == "ground truth"}
    assert len(truth) == 258 and {c.construction for c in made} == {"ground truth", "replaced", "removed"}
    for case in made:
        if case.construction == "ground truth":
            continue
        right = truth[case.id]
        assert [k for k in right.arguments if case.arguments[k] != right.arguments[k]] == (
            [case.planted] if case.construction == "replaced" else []
        )
        assert not stated(case.arguments[case.planted], case.texts)
        assert case.construction == "replaced" or stated(case.arguments[case.planted], right.texts)
    assert cases(requests) == made  # seeded
