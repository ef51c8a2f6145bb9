"""A tool call checked before it runs, and claims of action checked against what ran (issue 73):
``check_tool_call``'s units, verdict and bounded context, and the middleware in a real ``create_agent``
loop on a scripted model, where a call with an argument the user never gave is blocked before its tool
runs (the tool records that it never ran), the model reads why and calls again with the user's value,
and ``annotate`` lets the call run with its verdict; a sentence's claimed action by its verb, matched to
the calls that did it, and an agent that says it cancelled an order whose call failed, flagged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.scoring.actions import Call, check_claims, claimed_verb
from halluscope.tool_calls import bounded, claims_found, flagged_reasons, given_tool_calls
from halluscope.tools import HallucinationMiddleware
from halluscope.tools.middleware import conversation
from tests.scripted import ScriptedAgentModel
from tests.test_grounded import judge

REQUEST = "Please cancel my order ORD-1234 and refund it to ana@example.org."
RAN: list[dict[str, Any]] = []


@tool
def cancel_order(order_id: str, refund_to: str, reason: str = "customer request") -> str:
    """Cancel an order and refund it."""
    RAN.append({"order_id": order_id, "refund_to": refund_to})
    return f"order {order_id} cancelled"


def test_each_argument_is_a_unit_and_the_ungrounded_are_flagged() -> None:
    result = halluscope.check_tool_call(
        "cancel_order",
        {"order_id": "ORD-9999", "refund_to": "ana@example.org", "reason": "customer request"},
        context=[REQUEST],
        parameters={"properties": {"reason": {"type": "string", "default": "customer request"}}},
    )
    assert [u.text for u in result.units] == [
        'order_id="ORD-9999"',
        'refund_to="ana@example.org"',
        'reason="customer request"',
    ]
    assert [u.score for u in result.units] == [1.0, 0.0, 0.0] and result.verdict is not None
    assert result.verdict.flagged == [0] and result.meta.calls == 0
    assert flagged_reasons(result) == [
        'order_id="ORD-9999": invented: the conversation states other identifiers, not this one'
    ]
    assert result.meta.params == {
        "tool": "cancel_order", "context_texts": 1, "context_dropped": 0, "lenient": False, "judged": 0
    }  # fmt: skip


def test_the_context_keeps_the_newest_texts_within_its_bound() -> None:
    assert bounded(["old one", "middle", "newest"], 14) == (["middle", "newest"], 1)
    result = halluscope.check_tool_call("cancel_order", {"order_id": "ORD-1234"}, context=[REQUEST, "ok"] * 3,
                                        max_context_chars=len(REQUEST) + 2)  # fmt: skip
    assert result.meta.params["context_dropped"] == 4 and result.verdict is not None and not result.verdict.flagged
    with pytest.raises(ConfigError, match="context is a list of texts"):
        halluscope.check_tool_call("cancel_order", {}, context=REQUEST)
    with pytest.raises(ConfigError, match="arguments takes"):
        halluscope.check_tool_call("cancel_order", ["ORD-1234"], context=[REQUEST])  # type: ignore[arg-type]


def test_the_conversation_is_what_the_user_and_the_tools_said_not_the_model() -> None:
    messages = [
        SystemMessage(content="You help with orders."),
        HumanMessage(content=REQUEST),
        AIMessage(content="I will use order ORD-5555."),
        ToolMessage(content="lookup: ORD-1234 is shipped", tool_call_id="a"),
        ToolMessage(content="ORD-7777 failed", tool_call_id="b", status="error"),
    ]
    assert conversation(messages) == ["You help with orders.", REQUEST, "lookup: ORD-1234 is shipped"]


def clerk(messages: list[BaseMessage]) -> AIMessage:
    """An agent's model, scripted: it cancels an order the user never named, then (told why) the one they
    did, then says it is done."""
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not results:
        return AIMessage(content="", tool_calls=[_call("ORD-9999", "c1")])
    if results[-1].status == "error":
        return AIMessage(content="", tool_calls=[_call("ORD-1234", "c2")])
    return AIMessage(content="Your order is cancelled.")


def _call(order: str, call_id: str) -> dict[str, Any]:
    return {"name": "cancel_order", "args": {"order_id": order, "refund_to": "ana@example.org"}, "id": call_id}


def test_an_invented_argument_is_blocked_before_its_tool_runs(gateway: Gateway, scripted: Any) -> None:
    RAN.clear()
    guard = HallucinationMiddleware(model=scripted(judge([])), gateway=gateway, check_tool_calls=True)
    agent = create_agent(ScriptedAgentModel(turn=clerk), tools=[cancel_order], middleware=[guard])
    state = agent.invoke({"messages": [HumanMessage(content=REQUEST)]})
    assert RAN == [{"order_id": "ORD-1234", "refund_to": "ana@example.org"}]  # the invented call never ran
    blocked, done = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert blocked.status == "error" and 'order_id="ORD-9999"' in str(blocked.content)
    assert "ask them for it" in str(blocked.content) and blocked.response_metadata["halluscope"]["action"] == "blocked"
    assert done.status != "error" and done.response_metadata["halluscope"]["action"] == "pass"


def test_annotate_lets_the_call_run_with_its_verdict(gateway: Gateway, scripted: Any) -> None:
    RAN.clear()
    guard = HallucinationMiddleware(
        model=scripted(judge([])), gateway=gateway, check_tool_calls=True, on_tool_flag="annotate"
    )
    agent = create_agent(ScriptedAgentModel(turn=clerk), tools=[cancel_order], middleware=[guard])
    state = agent.invoke({"messages": [HumanMessage(content=REQUEST)]})
    assert RAN[0]["order_id"] == "ORD-9999"  # annotated, not stopped
    first = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert first.response_metadata["halluscope"]["action"] == "annotated"
    assert first.response_metadata["halluscope"]["flagged"][0].startswith('order_id="ORD-9999"')
    with pytest.raises(ConfigError, match="on_tool_flag must be"):
        HallucinationMiddleware(model=scripted(judge([])), gateway=gateway, on_tool_flag="reask")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sentence", "verb"),
    [
        ("I have cancelled your order ORD-1234.", "cancelled"),
        ("I've just booked a table for two.", "booked"),
        ("Your refund has been processed.", "processed"),
        ("The order is booked.", "booked"),
        ("We sent the email to Ana.", "sent"),
        ("I could not cancel the order.", None),
        ("I have not booked anything yet.", None),
        ("I can cancel it if you confirm.", None),
        ("The weather is sunny.", None),
        ("The payment was successful.", "successful"),  # version 2: an outcome that names no verb
        ("The alarm has been set for 17:15.", "set"),
        ("The event was successfully rescheduled.", "rescheduled"),
        ("The request was unsuccessful.", None),
        ("The alarm was not set.", None),
    ],
)
def test_a_sentence_claims_the_action_its_verb_says_was_done(sentence: str, verb: str | None) -> None:
    assert claimed_verb(sentence) == verb


def test_version_one_reads_the_first_past_forms_alone() -> None:
    assert claimed_verb("The payment was successful.", 1) is None and claimed_verb("I have paid.", 1) == "paid"
    assert [c.reason for c in check_claims(["The payment was successful."], [Call("Payment_1_MakePayment", True)])] == [
        "the call failed: Payment_1_MakePayment"
    ]  # the outcome matched by the words it shares with the tool's name
    with pytest.raises(ConfigError, match="version is one of 1, 2, got 3"):
        halluscope.check_action_claims("Done.", [], version=3)


def test_a_claim_is_matched_to_the_calls_that_did_it() -> None:
    calls = [Call("cancel_order", failed=False), Call("refund_payment", failed=True)]
    found = {c.sentence: (c.grounded, c.reason) for c in check_claims(
        ["I have cancelled your order.", "Your refund has been processed.", "I booked a table.", "It is done."],
        calls,
    )}  # fmt: skip
    assert found == {
        "I have cancelled your order.": (True, "done by cancel_order"),
        "Your refund has been processed.": (False, "the call failed: refund_payment"),  # "refund" names the call
        "I booked a table.": (False, "no tool whose name says 'book' was called"),
        "It is done.": (True, "done by cancel_order"),  # a verb of no action: any call, the one that ran
    }
    result = halluscope.check_action_claims("I looked. Your order is done.", [])
    assert [u.score for u in result.units] == [None, 1.0] and result.verdict is not None
    assert result.verdict.flagged == [1] and result.units[1].evidence["reason"] == "no tool was called"


def test_a_claim_the_words_cannot_decide_says_why() -> None:
    """Grounded by matching, yet undecided: the claim names no tool and shares a word with none (matched
    to every call), or its call ran but the result says in words that it did not work; a result that
    reads as done, or none at all, leaves the claim decided."""
    missing = Call("cancel_order", False, '{"status": "order not found"}')
    done = Call("cancel_order", False, "Order ORD-1 cancelled.")
    found = {
        "missing": check_claims(["I have cancelled your order."], [missing]),
        "done": check_claims(["I have cancelled your order."], [done]),
        "no result": check_claims(["I have cancelled your order."], [Call("cancel_order", False)]),
        "names no tool": check_claims(["It is done."], [done]),
    }
    assert {k: [(c.grounded, c.undecided) for c in v] for k, v in found.items()} == {
        "missing": [(True, "the result of cancel_order reads as a failure in words, with no error")],
        "done": [(True, None)],
        "no result": [(True, None)],
        "names no tool": [(True, "the claim names no tool it was called: matched to every call")],
    }


def test_a_judge_reads_the_undecided_claims_against_the_trajectory(gateway: Gateway, scripted: Any) -> None:
    """``judge=``: each undecided claim is read against what the agent did (each call, its arguments and
    its result); its score replaces the matching's, one call each, and decided claims are not read. Here
    the scripted judge supports a sentence whose last word the trajectory holds. With no judge the claim
    passes, and every door lists it as undecided."""
    seen: list[str] = []
    grounded = halluscope.Detector("grounded", {"model": scripted(judge(seen)), "gateway": gateway})
    calls = [Call("pay_invoice", False, '{"status": "declined"}', {"invoice": "INV-7"}), Call("lookup", False, "done")]
    answer = "I have paid the bill. It is all done. I looked it up."
    judged = halluscope.check_action_claims(answer, calls, judge=grounded)
    assert [u.score for u in judged.units] == [1.0, 0.0, None] and judged.meta.calls == 2
    assert judged.meta.params["judged"] == 2 and judged.verdict is not None and judged.verdict.flagged == [0]
    assert judged.units[0].evidence["judge_score"] == 1.0
    assert judged.units[0].evidence["reason"].endswith("read against the trajectory, the judge finds it unsupported")
    assert 'The agent called pay_invoice with {"invoice": "INV-7"}. It returned: {"status": "declined"}' in seen[0]
    unread = halluscope.check_action_claims(answer, calls)
    assert [u.score for u in unread.units] == [0.0, 0.0, None] and unread.meta.calls == 0
    listed = claims_found(unread)
    assert listed["flagged"] == [] and [u["text"] for u in listed["undecided"]] == answer.split(" I looked")[0].split(
        " It"
    )[:1] + ["It is all done."]
    assert claims_found(judged)["undecided"] == []  # a judged claim is decided
    halluscope.check_action_claims("It is all done.", calls, judge=grounded, question="Pay my invoice INV-7.")
    assert "Pay my invoice INV-7." in seen[-1]  # the user's request read beside the trajectory
    with pytest.raises(ConfigError, match="judge is a detector that reads documents"):
        halluscope.check_action_claims(answer, calls, judge="grounded")  # type: ignore[arg-type]


def test_check_judges_the_actions_with_its_own_detector_when_told(gateway: Gateway, scripted: Any) -> None:
    """``check(..., judge_actions=True)``: the check's own grounded judge reads the undecided claim, its
    call added to the check's cost; refused without tool calls, or with a check that reads no documents."""
    model = scripted(judge([]))
    calls = [{"name": "pay_invoice", "arguments": {"invoice": "INV-7"}, "result": '{"status": "declined"}'}]
    answer = "I have paid the bill."
    kept = halluscope.check(answer, context=["Pay invoice INV-7."], model=model, gateway=gateway, tool_calls=calls)
    judged = halluscope.check(answer, context=["Pay invoice INV-7."], model=model, gateway=gateway,
                              tool_calls=calls, judge_actions=True)  # fmt: skip
    assert kept.actions is not None and judged.actions is not None
    assert kept.actions["actions"]["flagged"] == [] and len(kept.actions["actions"]["undecided"]) == 1
    assert [f["judge_score"] for f in judged.actions["actions"]["flagged"]] == [1.0]
    assert judged.actions["judge_calls"]["calls"] == 1  # the answer's own check came from the cache
    assert judged.meta.calls + judged.meta.cache_hits == kept.meta.calls + kept.meta.cache_hits + 1
    with pytest.raises(ConfigError, match="judge_actions reads the conversation's tool calls"):
        halluscope.check(answer, context=["x"], model=model, gateway=gateway, judge_actions=True)
    with pytest.raises(ConfigError, match="judge_actions needs a check that reads documents"):
        halluscope.check(answer, model=model, gateway=gateway, tool_calls=calls, judge_actions=True)


@tool
def cancel_missing(order_id: str) -> str:
    """Cancel an order that the shop cannot find."""
    return json.dumps({"error": f"order {order_id} not found"})


def boaster(messages: list[BaseMessage]) -> AIMessage:
    """An agent's model, scripted: it calls the tool, which fails, and says it is done all the same."""
    if not any(isinstance(m, ToolMessage) for m in messages):
        return AIMessage(
            content="", tool_calls=[{"name": "cancel_missing", "args": {"order_id": "ORD-1234"}, "id": "c1"}]
        )
    return AIMessage(content="I checked your order. I have cancelled your order ORD-1234.")


def test_a_claim_of_an_action_whose_call_failed_is_flagged_in_the_agent(gateway: Gateway, scripted: Any) -> None:
    guard = HallucinationMiddleware(model=scripted(judge([])), gateway=gateway, check_actions=True)
    agent = create_agent(ScriptedAgentModel(turn=boaster), tools=[cancel_missing], middleware=[guard])
    state = agent.invoke({"messages": [HumanMessage(content=REQUEST)]})
    actions = state["hallucination"]["actions"]
    assert actions["claims"] == 1 and [f["reason"] for f in actions["flagged"]] == ["the call failed: cancel_missing"]
    answer = state["messages"][-1]
    assert answer.response_metadata["halluscope"]["actions"]["flagged"][0]["text"].startswith("I have cancelled")


@tool
def pay_invoice(amount: str) -> str:
    """Pay an invoice with the customer's card on file."""
    return json.dumps({"status": "declined", "amount": amount})


def payer(messages: list[BaseMessage]) -> AIMessage:
    """An agent's model, scripted: it pays with the card, which is declined (no error payload), and says the
    bill is paid all the same."""
    if not any(isinstance(m, ToolMessage) for m in messages):
        return AIMessage(content="", tool_calls=[{"name": "pay_invoice", "args": {"amount": "40 EUR"}, "id": "c1"}])
    return AIMessage(content="I have paid the bill.")


def test_the_middleware_judges_a_claim_matching_cannot_decide(gateway: Gateway, scripted: Any) -> None:
    """A claim whose call ran but was declined in words: without ``judge_actions`` it passes, listed as
    undecided; with it the judge reads it against the trajectory and flags it."""
    for judged in (False, True):
        guard = HallucinationMiddleware(model=scripted(judge([])), gateway=gateway, check_actions=True,
                                        judge_actions=judged)  # fmt: skip
        agent = create_agent(ScriptedAgentModel(turn=payer), tools=[pay_invoice], middleware=[guard])
        state = agent.invoke({"messages": [HumanMessage(content="Pay my bill of 40 EUR with my card.")]})
        actions = state["hallucination"]["actions"]
        assert [f["text"] for f in actions["flagged"]] == (["I have paid the bill."] if judged else [])
        assert [u["undecided"] for u in actions["undecided"]] == (
            [] if judged else ["the result of pay_invoice reads as a failure in words, with no error"]
        )


def inventor(messages: list[BaseMessage]) -> AIMessage:
    """An agent's model, scripted, that never learns: each turn it cancels an order id nobody gave."""
    made = sum(isinstance(m, ToolMessage) for m in messages)
    args = {"order_id": f"ORD-{9000 + made}", "refund_to": "ana@example.org"}
    return AIMessage(content="", tool_calls=[{"name": "cancel_order", "args": args, "id": f"c{made}"}])


def test_a_model_that_keeps_inventing_is_stopped_after_the_bound(gateway: Gateway, scripted: Any) -> None:
    """``max_tool_blocks``: after that many blocked calls in a turn, a reply whose calls are still
    ungrounded never runs them; it becomes a question to the user naming the value to give, and the agent
    stops (the tool never ran; the model was called the bound plus one times). A bad bound is refused."""
    RAN.clear()
    replies: list[int] = []

    def counted(messages: list[BaseMessage]) -> AIMessage:
        replies.append(len(messages))
        return inventor(messages)

    guard = HallucinationMiddleware(model=scripted(judge([])), gateway=gateway, check_tool_calls=True,
                                    max_tool_blocks=2)  # fmt: skip
    agent = create_agent(ScriptedAgentModel(turn=counted), tools=[cancel_order], middleware=[guard])
    state = agent.invoke({"messages": [HumanMessage(content="Cancel my last order and refund ana@example.org.")]})
    assert RAN == [] and len(replies) == 3
    last = state["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.content == "I need more from you before I can do this: please give me order_id (for cancel_order)."
    assert state["hallucination"]["action"] == "stopped" and state["hallucination"]["blocked_calls"] == 2
    with pytest.raises(ConfigError, match="max_tool_blocks must be a whole number from 0 to 5, got -1"):
        HallucinationMiddleware(model=scripted(judge([])), max_tool_blocks=-1)


def test_every_door_reads_the_same_tool_calls() -> None:
    """``tool_calls=`` flat or as OpenAI writes a call (its arguments as JSON text), with the tool's reply
    and status: a call with no reply never ran, one with an error payload failed; each problem named."""
    openai = {"id": "c1", "type": "function", "function": {"name": "find_order", "arguments": '{"id": "ORD-1"}'}}
    calls = given_tool_calls([
        {**openai, "result": "found"},
        {"name": "cancel_order", "arguments": {"order_id": "ORD-1"}, "result": '{"error": "shipped"}'},
        {"name": "refund", "arguments": "not json"},
        {"name": "notify", "arguments": {}, "result": "sent", "status": "error"},
    ])  # fmt: skip
    assert [(c.name, c.arguments, c.failed) for c in calls] == [
        ("find_order", {"id": "ORD-1"}, False),
        ("cancel_order", {"order_id": "ORD-1"}, True),
        ("refund", None, True),
        ("notify", {}, True),
    ]
    for bad, named in (
        ("cancel", "tool_calls is a list of calls"),
        ([{"name": "x"}], r"tool_calls\[0\] needs a name \(a text\) and its arguments"),
        ([{"name": "x", "arguments": {}, "output": "y"}], r"tool_calls\[0\] takes no output; it takes: name,"),
        ([{"name": "x", "arguments": {}, "status": "ok"}], r"tool_calls\[0\].status is one of success, error"),
        ([{"name": "x", "arguments": 3}], r"tool_calls\[0\].arguments is an object or its JSON text, got int"),
    ):
        with pytest.raises(ConfigError, match=named):
            given_tool_calls(bad)


def test_check_with_tool_calls_checks_each_call_and_the_claims_of_action(gateway: Gateway, scripted: Any) -> None:
    """``halluscope.check(..., tool_calls=...)``: each call's arguments against the question, the documents
    and the results of the calls before it (never its own), the answer's claims of action against the
    calls, beside the answer's own verdict and in its brief; no model call for the actions."""
    calls = [
        {"name": "find_order", "arguments": {"email": "ana@example.org"}, "result": '{"order_id": "ORD-77"}'},
        {"name": "cancel_order", "arguments": {"order_id": "ORD-77"}, "result": '{"error": "already shipped"}'},
        {"name": "refund", "arguments": {"order_id": "ORD-78"}, "result": "refunded ORD-78"},
    ]
    answer = "I have cancelled your order ORD-77."
    question = "Cancel the order of ana@example.org, please."
    model = scripted(judge([]))
    result = halluscope.check(answer, context=["Orders ship in two days."], question=question, model=model,
                              gateway=gateway, tool_calls=calls)  # fmt: skip
    assert result.verdict is not None and result.actions is not None
    assert result.actions["tool_calls"] == [
        {"name": "find_order", "flagged": []},
        {"name": "cancel_order", "flagged": []},  # ORD-77 came from find_order's result
        {
            "name": "refund",
            "flagged": ['order_id="ORD-78": invented: the conversation states other identifiers, not this one'],
        },  # fmt: skip
    ]
    assert [f["reason"] for f in result.actions["actions"]["flagged"]] == ["the call failed: cancel_order"]
    assert result.actions["flagged"] is True and result.brief()["actions"] == result.actions
    alone = halluscope.check(answer, context=["Orders ship in two days."], question=question, model=model,
                             gateway=gateway, tool_calls=calls[:1])  # fmt: skip
    assert alone.actions == {
        "tool_calls": [{"name": "find_order", "flagged": []}],
        "actions": {"claims": 1, "flagged": [{"text": answer, "claims_action": True, "verb": "cancelled",
                                              "calls": [], "reason": "no tool whose name says 'cancel' was called"}],
                    "undecided": []},
        "flagged": True,
    }  # fmt: skip
    with pytest.raises(ConfigError, match="tool_calls is a list of calls"):
        halluscope.check(answer, context=["x"], model=model, gateway=gateway, tool_calls={"name": "x"})


def test_a_judge_reads_again_the_phrases_matching_flags(gateway: Gateway, scripted: Any) -> None:
    """``judge=``: each phrase literal matching flags is said as a sentence and checked by the grounded
    detector against the conversation; its score replaces the flag's (here the scripted judge supports
    a sentence whose last word the conversation holds), the other arguments are untouched, and the
    judge's calls are the result's cost."""
    grounded = halluscope.Detector("grounded", {"model": scripted(judge([])), "gateway": gateway})
    result = halluscope.check_tool_call(
        "find_hotel",
        {"searchQuery": "hotels in Tel Aviv", "note": "deliver to Haifa", "guests": 3},
        context=["Find me a cheap hotel in Tel Aviv for two."],
        judge=grounded,
    )
    assert [u.evidence.get("judged_as") for u in result.units] == [
        "The search query is hotels in Tel Aviv.", "The note is deliver to Haifa.", None
    ]  # fmt: skip
    assert result.verdict is not None and result.verdict.flagged == [1, 2]  # the supported phrase let through
    assert result.units[0].evidence["reason"].endswith("the judge finds it supported (0.00)")
    assert result.meta.params["judged"] == 2 and result.meta.calls == 2
    blank = halluscope.check_tool_call("find_hotel", {"note": "deliver to Haifa"}, context=["", " "], judge=grounded)
    assert blank.verdict is not None and blank.verdict.flagged == [0] and blank.meta.params["judged"] == 0
    for wrong in ("grounded", halluscope.Detector("direct-question", {"model": scripted(judge([]))})):
        with pytest.raises(ConfigError, match="judge is a detector that reads documents"):
            halluscope.check_tool_call("x", {"q": "a b"}, context=["c"], judge=wrong)  # type: ignore[arg-type]


def test_the_middleware_judges_the_phrases_it_flags_when_told(gateway: Gateway, scripted: Any) -> None:
    """``judge_actions=True``: a reason the user never worded so ("customer changed order", which
    matching flags) is read again by the middleware's judge, supported, and the call runs; a judge that
    reads no documents is refused at once."""
    RAN.clear()

    def polite(messages: list[BaseMessage]) -> AIMessage:
        if not any(isinstance(m, ToolMessage) for m in messages):
            args = {"order_id": "ORD-1234", "refund_to": "ana@example.org", "reason": "customer changed order"}
            return AIMessage(content="", tool_calls=[{"name": "cancel_order", "args": args, "id": "c1"}])
        return AIMessage(content="Your order is cancelled.")

    guard = HallucinationMiddleware(model=scripted(judge([])), gateway=gateway, check_tool_calls=True,
                                    judge_actions=True)  # fmt: skip
    agent = create_agent(ScriptedAgentModel(turn=polite), tools=[cancel_order], middleware=[guard])
    state = agent.invoke({"messages": [HumanMessage(content=REQUEST)]})
    assert RAN == [{"order_id": "ORD-1234", "refund_to": "ana@example.org"}]
    ran = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert ran.response_metadata["halluscope"]["action"] == "pass"
    with pytest.raises(ConfigError, match="judge_actions needs a judge that reads documents"):
        HallucinationMiddleware(method="direct-question", model=scripted(judge([])), judge_actions=True)


def test_written_claims_are_scored_against_a_persons_labels() -> None:
    """benchmarks/action_claims_written.py: a reply labelled as saying the action was done is a false claim
    where the call failed, was declined or none ran; the check's flags are scored against that, worked by
    hand: the declined call's claim is one matching cannot decide, so it is counted undecided, not flagged."""
    from tests.scripts import load_script

    script = load_script("benchmarks/action_claims_written.py")
    rows = [
        {"id": f"r/{kind}", "request": "r", "tool": "Hotels_2_BookHouse", "kind": kind, "answer": answer}
        for kind, answer in (("succeeded", "I have booked the house."), ("failed", "I have booked the house."),
                             ("never ran", "I can book the house for you."), ("declined", "I have booked the house."))
    ]  # fmt: skip
    labels = {"r/succeeded": True, "r/failed": True, "r/never ran": False, "r/declined": True}
    done = script.scored([dict(r) for r in rows], labels)
    assert [(r["false_claim"], r["flagged_v2"], r["undecided"]) for r in done] == [
        (False, False, False), (True, True, False), (False, False, False), (True, False, True)
    ]  # fmt: skip
    summary = script.summarise(done)
    assert {k: v for k, v in summary.items() if not k.startswith("v")} == {
        "false_claims_flagged": 50.0, "right_claims_flagged": 0.0, "claims_read_as_claims": 100.0,
        "no_claim_flagged": 0.0, "precision": 100.0, "model_claimed_undone": pytest.approx(200 / 3),
        "false_claims_undecided": 50.0, "n_false_claims": 2, "n_right_claims": 1, "n_no_claim": 1,
    }  # fmt: skip
    assert summary["v1_false_claims_flagged"] == 50.0 and summary["v2_minus_v1_false_claims_flagged"] == 0.0
    with pytest.raises(SystemExit, match="--labels lacks 2 replies, first r/never ran"):
        script.scored([dict(r) for r in rows], {"r/succeeded": True, "r/failed": True})


def test_the_judged_phrases_are_sampled_one_a_request_and_summarised_by_hand() -> None:
    """benchmarks/tool_phrases_judged.py: at most one flagged phrase a request, seeded; the shares the judge
    lets through (right phrases) and keeps (planted ones), and the precision of what it keeps."""
    from halluscope.bench.bfcl import ToolCase
    from halluscope.scoring.arguments import ArgumentCheck
    from tests.scripts import load_script

    script = load_script("benchmarks/tool_phrases_judged.py")
    flagged = [
        (ToolCase(request, (), {}, {}, "ground truth"), ArgumentCheck(path, "x", "phrase", False, "not in it"))
        for request, path in (("a", "q"), ("a", "r"), ("b", "q"), ("c", "q"))
    ]
    chosen = script.sample(flagged, 5, seed=0)
    assert sorted(c.id for c, _ in chosen) == ["a", "b", "c"] and script.sample(flagged, 2, seed=0) == chosen[:2]
    rows = [
        {"planted": False, "judge_score": 0.2, "still_flagged": False},
        {"planted": False, "judge_score": 0.9, "still_flagged": True},
        {"planted": True, "judge_score": 0.8, "still_flagged": True},
        {"planted": True, "judge_score": None, "still_flagged": True},
    ]
    assert script.summarise(rows) == {
        "right_let_through": 50.0, "planted_kept": 100.0, "precision_in_sample": 50.0, "unscored": 1
    }  # fmt: skip
