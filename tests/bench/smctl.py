#!/usr/bin/env python3
"""smctl.py SOCKET [--get KEY[,KEY...]] [--pid] [REQUEST WORDS...]

A minimal client of the control sockets (sched/ctl_proto.h) for the
benchmark scripts: the daemon's (ctl-PID.sock) and the arbiter's, which
speak the same line format. It reads the greeting, sends REQUEST (default
`status`), prints the record lines up to the final `ok` and exits 0, or
prints the `error` line on stderr and exits 1.

  --pid        print the pid of the greeting and send nothing (how the
               scripts find the arbiter a mount started, to stop it by pid)
  --get KEYS   print only KEYS' values of the first record, one per line
               (decoded), instead of the records
  --all KEYS   the same for every record, one line per record, tab-separated
"""
import socket
import sys

TIMEOUT_S = 5.0


def decode(v):
    out, i = bytearray(), 0
    b = v.encode("latin-1")
    while i < len(b):
        if b[i] == 0x25 and i + 2 < len(b):
            out.append(int(b[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(b[i])
            i += 1
    return out.decode("utf-8", "replace")


def parse(line):
    parts = line.split(" ")
    fields = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        fields[k] = decode(v)
    return parts[0], fields


def lines(sock):
    buf = b""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode("latin-1")
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk


def main(argv):
    get = all_keys = None
    want_pid = False
    args = argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    path = args.pop(0)
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--pid":
            want_pid = True
        elif opt == "--get":
            get = args.pop(0).split(",")
        elif opt == "--all":
            all_keys = args.pop(0).split(",")
        else:
            print("smctl: unknown option " + opt, file=sys.stderr)
            return 2
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT_S)
    try:
        s.connect(path)
        it = lines(s)
        word, greet = parse(next(it))
        if want_pid:
            print(greet.get("pid", ""))
            return 0
        s.sendall((" ".join(args or ["status"]) + "\n").encode())
        first = True
        for line in it:
            word, fields = parse(line)
            if word == "ok":
                return 0
            if word == "error":
                print("smctl: " + line, file=sys.stderr)
                return 1
            if get is not None:
                if first:
                    for k in get:
                        print(fields.get(k, ""))
            elif all_keys is not None:
                print("\t".join(fields.get(k, "") for k in all_keys))
            else:
                print(line)
            first = False
        print("smctl: connection closed before ok", file=sys.stderr)
        return 1
    except (OSError, StopIteration) as e:
        print("smctl: %s: %s" % (path, e or "no greeting"), file=sys.stderr)
        return 1
    finally:
        s.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
