"""daemon/connection.py: a client connection over an asyncio transport, its reads bounded."""

from __future__ import annotations

import socket

import anyio
import pytest

from agentcoordd.daemon.connection import READ_AHEAD, Connection


@pytest.fixture
def pair():
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server.setblocking(False)
    client.setblocking(False)
    yield server, client
    client.close()
    server.close()


def push(client: socket.socket, data: bytes) -> int:
    """Write what the kernel takes without blocking; how much it took."""
    sent = 0
    try:
        while sent < len(data):
            sent += client.send(data[sent:sent + 65536])
    except BlockingIOError:
        pass
    return sent


async def test_a_client_that_sends_ahead_is_read_only_up_to_read_ahead(pair):
    server, client = pair
    connection = await Connection.attach(server)
    pushed = push(client, b"x" * (8 * 1024 * 1024))
    await anyio.sleep(0.2)
    assert pushed > READ_AHEAD  # the rest waits in the kernel, not in the daemon
    assert len(connection.buffer) == READ_AHEAD
    assert await connection.receive_exactly(10, 1.0) == b"x" * 10
    await anyio.sleep(0.1)
    assert len(connection.buffer) == READ_AHEAD  # refilled to the mark, no further
    connection.close()


async def test_a_frame_larger_than_read_ahead_is_read_whole_and_the_mark_comes_back(pair):
    server, client = pair
    connection = await Connection.attach(server)
    size = 5 * READ_AHEAD
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async def feed() -> None:
                data = b"y" * (size + 3 * READ_AHEAD)
                while data:
                    data = data[push(client, data):]
                    await anyio.sleep(0.01)

            tg.start_soon(feed)
            assert await connection.receive_exactly(size, 5.0) == b"y" * size
            await anyio.sleep(0.2)
            assert len(connection.buffer) <= READ_AHEAD
    connection.close()


async def test_a_read_times_out_and_the_end_of_stream_is_an_incomplete_read(pair):
    server, client = pair
    connection = await Connection.attach(server)
    with pytest.raises(TimeoutError):
        await connection.receive_exactly(4, 0.05)
    client.send(b"ab")
    client.shutdown(socket.SHUT_WR)
    with pytest.raises(anyio.IncompleteRead):
        await connection.receive_exactly(4, 1.0)
    assert bytes(connection.buffer) == b"ab"  # what arrived stays for the caller to see
    await connection.send(b"still answered", 1.0)  # half-closed: replies still go out
    await anyio.sleep(0.05)
    assert client.recv(100) == b"still answered"
    connection.close()


async def test_a_write_the_client_does_not_read_times_out(pair):
    server, client = pair
    connection = await Connection.attach(server)
    with pytest.raises(TimeoutError):
        await connection.send(b"z" * (16 * 1024 * 1024), 0.2)
    connection.close()


async def test_a_write_to_a_client_that_left_is_a_broken_resource(pair):
    server, client = pair
    connection = await Connection.attach(server)
    client.close()
    with pytest.raises(anyio.BrokenResourceError):
        for _ in range(3):  # the first write may still reach the socket buffer
            await connection.send(b"reply", 1.0)
            await anyio.sleep(0.05)
    connection.close()


async def test_a_large_reply_arrives_whole_and_in_order(pair):
    server, client = pair
    connection = await Connection.attach(server)
    reply = bytes(range(256)) * (40 * 1024)  # 10 MiB, many SEND_CHUNKs
    received = bytearray()

    async def read_all() -> None:
        while len(received) < len(reply):
            try:
                received.extend(client.recv(1 << 20))
            except BlockingIOError:
                await anyio.sleep(0.001)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_all)
            await connection.send(reply, 5.0)
    assert bytes(received) == reply
    connection.close()
