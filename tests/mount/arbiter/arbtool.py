#!/usr/bin/env python3
"""A client of the line protocols of slowmedia (sched/ctl_proto.h) for the
arbiter mount tests: the daemons' control sockets and the arbiter's socket.

  arbtool.py request SOCK LINE [TIMEOUT_S]
      Connect, read the greeting, send LINE, print every line received up to
      and with the final `ok ...` or `error ...`. Exit 0 on ok, 1 on error,
      3 when the connection ended or TIMEOUT_S (default 5) passed first.
  arbtool.py session SOCK WAIT_S [LINE...]
      Connect, print the greeting, send each LINE (one write each, '\\n'
      appended; `@long:N` stands for a line of N bytes of 'x' without any
      '\\n' of its own, `@raw:HEX` for those bytes as they are; `{id}` in a
      LINE is the id of the `registered` answer, waited for), then print
      what comes back for WAIT_S seconds; the last line printed is `EOF`
      when the server closed the connection, else `OPEN`.
  arbtool.py silent SOCK SECONDS
      Connect, print `connected` (and the greeting), say nothing for
      SECONDS, then close.
  arbtool.py get SOCK KEY...
      `status` to a daemon's control socket: the decoded values of the KEYs
      of its `mount` record, one a line (exit 1 when there is none).
  arbtool.py field LINE KEY
      The decoded value of KEY in a protocol LINE (exit 1 when absent).
  arbtool.py readtime FILE SIZE COUNT PAUSE_S
      COUNT O_DIRECT reads of SIZE bytes, one after the other from offset 0,
      PAUSE_S seconds apart: a line `read OFFSET SECS` for each.
  arbtool.py readfor FILE SIZE SECS
      O_DIRECT reads of SIZE bytes back to back (no pause) from offset 0,
      new ones begun for SECS seconds (the last one is waited for): a line
      `read OFFSET SECS` for each, then `total BYTES SECS` (exit 1 on a
      short read: make FILE large enough).
"""
import os
import select
import socket
import sys
import time


def connect(path, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


class Lines:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.eof = False

    def read(self, deadline):
        """One line (bytes, without '\\n'), or None at EOF or the deadline."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return None
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.eof = True
                continue
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def out(line):
    sys.stdout.write(line.decode("utf-8", "backslashreplace") + "\n")
    sys.stdout.flush()


def decode(v):
    b = bytearray()
    i = 0
    while i < len(v):
        if v[i] == "%" and i + 3 <= len(v):
            b.append(int(v[i + 1:i + 3], 16))
            i += 3
        else:
            b.extend(v[i].encode())
            i += 1
    return b.decode("utf-8", "backslashreplace")


def cmd_request(argv):
    path, line = argv[0], argv[1]
    timeout = float(argv[2]) if len(argv) > 2 else 5.0
    deadline = time.monotonic() + timeout
    try:
        s = connect(path, timeout)
    except OSError as e:
        print("connect: %s" % e)
        return 3
    rd = Lines(s)
    greeting = rd.read(deadline)
    if greeting is None:
        print("no greeting")
        return 3
    try:
        s.sendall(line.encode() + b"\n")
    except OSError as e:
        print("send: %s" % e)
        return 3
    while True:
        got = rd.read(deadline)
        if got is None:
            print("EOF" if rd.eof else "TIMEOUT")
            return 3
        out(got)
        if got == b"ok" or got.startswith(b"ok "):
            return 0
        if got.startswith(b"error"):
            return 1


def payload(arg):
    if arg.startswith("@long:"):
        return b"x" * int(arg[6:])
    if arg.startswith("@raw:"):
        return bytes.fromhex(arg[5:])
    return arg.encode() + b"\n"


def cmd_session(argv):
    path, wait = argv[0], float(argv[1])
    try:
        s = connect(path)
    except OSError as e:
        print("connect: %s" % e)
        return 3
    rd = Lines(s)
    g = rd.read(time.monotonic() + 5)
    if g is None:
        print("no greeting")
        return 3
    out(g)
    reg = [None]

    def show(got):
        out(got)
        if got.startswith(b"registered "):
            reg[0] = fields(got.decode())["id"]

    for a in argv[2:]:
        if "{id}" in a:
            deadline = time.monotonic() + 5
            while reg[0] is None:
                got = rd.read(deadline)
                if got is None:
                    break
                show(got)
            a = a.replace("{id}", reg[0] or "0")
        try:
            s.sendall(payload(a))
        except OSError:
            break
        time.sleep(0.02)
    deadline = time.monotonic() + wait
    while True:
        got = rd.read(deadline)
        if got is None:
            break
        show(got)
    if not rd.eof:
        # The deadline came: was it closed meanwhile, with nothing more to say?
        r, _, _ = select.select([s], [], [], 0)
        if r:
            try:
                rd.eof = not s.recv(65536, socket.MSG_PEEK)
            except OSError:
                rd.eof = True
    print("EOF" if rd.eof else "OPEN")
    return 0


def cmd_silent(argv):
    path, secs = argv[0], float(argv[1])
    s = connect(path)
    rd = Lines(s)
    g = rd.read(time.monotonic() + 5)
    print("connected")
    if g is not None:
        out(g)
    sys.stdout.flush()
    time.sleep(secs)
    s.close()
    return 0


def fields(line):
    d = {}
    for f in line.split(" ")[1:]:
        k, _, v = f.partition("=")
        d[k] = decode(v)
    return d


def cmd_get(argv):
    path, keys = argv[0], argv[1:]
    deadline = time.monotonic() + 5
    try:
        s = connect(path)
    except OSError as e:
        sys.stderr.write("connect %s: %s\n" % (path, e))
        return 1
    rd = Lines(s)
    if rd.read(deadline) is None:
        return 1
    s.sendall(b"status\n")
    rec = None
    while True:
        got = rd.read(deadline)
        if got is None:
            return 1
        got = got.decode("utf-8", "backslashreplace")
        if got.startswith("mount ") and rec is None:
            rec = fields(got)
        if got == "ok" or got.startswith("ok ") or got.startswith("error"):
            break
    if rec is None:
        return 1
    for k in keys:
        print(rec.get(k, ""))
    return 0


def timed_reads(path, size, go_on, pause):
    """O_DIRECT reads of size bytes from offset 0, one after the other while
    go_on(), pause seconds apart: a line `read OFFSET SECS` for each. The
    bytes read in all, or None after a short read (said on stdout)."""
    import mmap
    buf = mmap.mmap(-1, size)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    off = 0
    try:
        while go_on():
            t = time.monotonic()
            n = os.preadv(fd, [buf], off)
            dt = time.monotonic() - t
            if n != size:
                print("short read %d at %d" % (n, off))
                return None
            print("read %d %.4f" % (off, dt))
            sys.stdout.flush()
            off += size
            time.sleep(pause)
    finally:
        os.close(fd)
    return off


def cmd_readtime(argv):
    path, size, count, pause = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    left = [count]

    def go_on():
        left[0] -= 1
        return left[0] >= 0
    return 0 if timed_reads(path, size, go_on, pause) is not None else 1


def cmd_readfor(argv):
    path, size, secs = argv[0], int(argv[1]), float(argv[2])
    t0 = time.monotonic()
    total = timed_reads(path, size, lambda: time.monotonic() - t0 < secs, 0)
    if total is None:
        return 1
    print("total %d %.3f" % (total, time.monotonic() - t0))
    return 0


def cmd_field(argv):
    line, key = argv[0], argv[1]
    for f in line.split(" ")[1:]:
        k, _, v = f.partition("=")
        if k == key:
            print(decode(v))
            return 0
    return 1


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    cmd = {"request": cmd_request, "session": cmd_session,
           "silent": cmd_silent, "field": cmd_field,
           "get": cmd_get, "readtime": cmd_readtime,
           "readfor": cmd_readfor}.get(sys.argv[1])
    if not cmd:
        sys.stderr.write(__doc__)
        return 2
    return cmd(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
