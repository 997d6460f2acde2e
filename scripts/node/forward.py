#!/usr/bin/env python3
"""Forwards 127.0.0.1:PORT of the machine's network namespace to 127.0.0.1:PORT inside a
node's network namespace (scripts/node.sh): how the tests, kubectl and helm on the machine
reach the node's API server, which listens only inside the node's namespace.

    forward.py NETNS PORT

The listening socket is made first, in the machine's namespace; then the process enters the
node's namespace (setns), so that every connection it makes is made there: a socket stays in
the namespace it was created in. Both ends are loopback, each in its own namespace: nothing
here dials anything else. Stdlib only: two threads a connection.
"""

import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def enter(netns_path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns_path, os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        sys.exit(f"forward: setns {netns_path}: {os.strerror(err)}")
    os.close(fd)


def pump(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, port):
    try:
        inner = socket.create_connection(("127.0.0.1", port))
    except OSError:
        conn.close()
        return
    out = threading.Thread(target=pump, args=(conn, inner), daemon=True)
    out.start()
    pump(inner, conn)
    out.join()
    conn.close()
    inner.close()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: forward.py NETNS PORT")
    netns, port = sys.argv[1], int(sys.argv[2])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(512)
    enter(netns)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(conn, port), daemon=True).start()


if __name__ == "__main__":
    main()
