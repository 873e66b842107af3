"""The link to a python model's stub: messages sent right after an answer reach their handler."""

from __future__ import annotations

import socket
import threading

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
