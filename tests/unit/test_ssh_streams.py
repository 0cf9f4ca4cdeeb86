"""The SSH client's own streams over a paramiko channel (a fake channel here: the real one
is driven by tests/integration/test_ssh.py against a real sshd)."""
from __future__ import annotations

import gc

from drillbit.transport.ssh import _ChannelWriter, _channel_lines


class FakeChannel:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.sent: list[bytes] = []

    def recv(self, n: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)


def test_lines_cut_anywhere_come_back_whole_and_a_last_unended_line_is_kept():
    text = '{"id": 1, "ok": "é"}\n{"id": 2}\n\n{"id": 3, "big": "' + "x" * 200_000 + '"}\n{"id": 4'
    data = text.encode()
    for size in (1, 2, 7, 65536, len(data)):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        assert list(_channel_lines(FakeChannel(chunks))) == [
            '{"id": 1, "ok": "é"}\n', '{"id": 2}\n', "\n", '{"id": 3, "big": "' + "x" * 200_000 + '"}\n', '{"id": 4']


def test_an_empty_channel_gives_no_line():
    assert list(_channel_lines(FakeChannel([]))) == []


def test_the_writer_sends_text_as_it_is_written_and_leaves_nothing_for_a_finalizer():
    chan = FakeChannel([])
    writer = _ChannelWriter(chan)
    assert writer.write('{"id": 1}\n') == 10
    writer.flush()
    assert chan.sent == [b'{"id": 1}\n']
    cycle = [writer]
    cycle.append(cycle)  # a writer in a reference cycle, as paramiko's files were on CI
    del writer, cycle
    assert gc.collect() >= 1
