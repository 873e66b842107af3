"""The link to a python model's stub: messages sent right after an answer reach their handler; posted messages keep
their order."""

from __future__ import annotations

import socket
import threading

import numpy as np

from engine.backends.python_channel import Channel, ChannelClosed, Exchange, Region


def test_it_handles_messages_that_follow_an_answer():
    """The bug: a decoupled model's responses, sent right after its execute was answered, were read into the buffer
    by the asking thread and left there while the serving thread waited on the socket; the stream never got them."""
    ours, theirs = socket.socketpair()
    channel = Channel(ours, Region.create("out"), Region.create("in"))
    peer = Channel(theirs, Region.create("peer-out"), Region.create("peer-in"))
    notes = [0]
    counted = threading.Condition()

    def handle(header: dict, arrays: list) -> None:
        if header.get("op") == "note":
            with counted:
                notes[0] += 1
                counted.notify_all()

    exchange = Exchange(channel, handle)
    threading.Thread(target=exchange.serve, daemon=True).start()

    def answer_then_notes() -> None:
        try:
            while True:
                header, _ = peer.receive()
                peer.send({"answer": header["id"], "op": "done"})
                for index in range(15):  # as a model thread sends responses once execute has returned
                    peer.send({"op": "note", "index": index})
        except ChannelClosed:
            pass  # the test is over and closed the link

    threading.Thread(target=answer_then_notes, daemon=True).start()
    for round_number in range(1, 21):
        assert exchange.ask({"op": "execute"}, timeout=10)[0]["op"] == "done"
        with counted:
            assert counted.wait_for(lambda n=round_number: notes[0] >= 15 * n, timeout=10), notes[0]
    theirs.close()
    channel.close()


def test_posted_messages_arrive_in_order_with_their_tensors_and_before_a_later_send():
    """Posts (a decoupled model's responses, metric updates) are written by the writer thread, several at once; a
    send from the same thread still arrives after everything that thread posted before it."""
    ours, theirs = socket.socketpair()
    sender = Channel(ours, Region.create("out"), Region.create("in"))
    reader = Channel(theirs, Region.create("peer-out"), Region.create("peer-in"))

    def post_from(name: str) -> None:
        for index in range(300):
            sender.post({"op": "note", "from": name, "index": index}, [np.array([index], dtype=np.int32)])
        sender.send({"op": "done", "from": name})

    threads = [threading.Thread(target=post_from, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    seen: dict[str, list[int]] = {"a": [], "b": []}
    done: set[str] = set()
    while len(done) < 2:
        header, arrays = reader.receive()
        if header["op"] == "done":
            assert len(seen[header["from"]]) == 300  # nothing it posted before the send is still on its way
            done.add(header["from"])
        else:
            assert int(arrays[0][0]) == header["index"]
            seen[header["from"]].append(header["index"])
    for thread in threads:
        thread.join()
    assert seen == {"a": list(range(300)), "b": list(range(300))}
    theirs.close()
    try:
        for _ in range(1000):  # the writer finds the link closed; posts raise from then on
            sender.post({"op": "note"})
            threading.Event().wait(0.001)
    except ChannelClosed:
        pass
    else:
        raise AssertionError("posting on a closed link never failed")
    finally:
        sender.close()


def test_it_drops_a_message_it_cannot_handle_and_goes_on_serving(caplog):
    """Model code may write anything on its link (a `call_cancel` without `call`): the serving thread and an asker
    both drop what their handler cannot take, and the messages after it are handled."""
    ours, theirs = socket.socketpair()
    channel = Channel(ours, Region.create("out"), Region.create("in"))
    peer = Channel(theirs, Region.create("peer-out"), Region.create("peer-in"))
    handled: list[int] = []
    seen = threading.Condition()

    def handle(header: dict, arrays: list) -> None:
        index = header["index"]  # a KeyError for the malformed messages
        with seen:
            handled.append(index)
            seen.notify_all()

    exchange = Exchange(channel, handle)
    serving = threading.Thread(target=exchange.serve, daemon=True)
    serving.start()
    peer.send({"op": "call_cancel"})
    peer.send({"op": "note", "index": 1})
    with seen:
        assert seen.wait_for(lambda: handled == [1], timeout=10)
    assert serving.is_alive()

    def answer_after_garbage() -> None:
        header, _ = peer.receive()
        peer.send({"op": "call_cancel"})  # read by the asking thread this time
        peer.send({"op": "note", "index": 2})
        peer.send({"answer": header["id"], "op": "done"})

    threading.Thread(target=answer_after_garbage, daemon=True).start()
    assert exchange.ask({"op": "execute"}, timeout=10)[0]["op"] == "done"
    with seen:
        assert seen.wait_for(lambda: handled == [1, 2], timeout=10)
    assert serving.is_alive()
    assert "could not be handled" in caplog.text
    theirs.close()
    channel.close()


def test_the_server_handles_messages_in_the_order_they_came_whoever_reads_them():
    """The bug: the serving thread read a decoupled model's response and handed it over after releasing the read
    lock; an asking thread (the next execute) read the responses behind it and the final meanwhile, so the first
    one reached its stream after the final and was dropped ('echo: monitord' for 'echo: monitored')."""
    ours, theirs = socket.socketpair()
    channel = Channel(ours, Region.create("out"), Region.create("in"))
    peer = Channel(theirs, Region.create("peer-out"), Region.create("peer-in"))
    handled: list[int] = []
    changed = threading.Condition()
    first_in_hand = threading.Event()

    def handle(header: dict, arrays: list) -> None:
        index = header["index"]
        if index == 1:
            first_in_hand.set()
            with changed:  # an asker must not overtake this one meanwhile: bounded, the answer is "never"
                changed.wait_for(lambda: 2 in handled, timeout=1)
        with changed:
            handled.append(index)
            changed.notify_all()

    exchange = Exchange(channel, handle, in_order=True)
    threading.Thread(target=exchange.serve, daemon=True).start()
    peer.send({"op": "response", "index": 1})
    assert first_in_hand.wait(timeout=10)

    def answer_behind_a_response() -> None:
        header, _ = peer.receive()
        peer.send({"op": "response", "index": 2})
        peer.send({"answer": header["id"], "op": "done"})

    threading.Thread(target=answer_behind_a_response, daemon=True).start()
    assert exchange.ask({"op": "execute"}, timeout=10)[0]["op"] == "done"
    with changed:
        assert changed.wait_for(lambda: len(handled) == 2, timeout=10)
    assert handled == [1, 2]
    theirs.close()
    channel.close()
