#!/bin/bash
# slowmediactl spool list|recover|discard on spools that spool-gen writes
# through sched/spool.c: list's figures (human and --json, parsed by
# python3), recover giving exactly the tree spool-gen expects, recover
# refusing a DEST in or around the spool and never following a symlink
# planted in DEST, damage stopping recover (and --include-damaged going on),
# recover and discard refused while another process holds the medium's
# lock, discard asking on a terminal and refusing without one, and every
# misuse: one line on stderr and its documented exit status. No FUSE, no
# root: it runs everywhere.
# usage: spool-cli.sh SLOWMEDIACTL SPOOL_GEN
CTL=$1 GEN=$2
set -u
[ -x "$CTL" ] || { echo "slowmediactl '$CTL' is not executable"; exit 1; }
[ -x "$GEN" ] || { echo "spool-gen '$GEN' is not executable"; exit 1; }

T=$(mktemp -d /tmp/spool-cli.XXXXXX)
HOLDER=""
cleanup() {
	[ -n "$HOLDER" ] && kill "$HOLDER" 2>/dev/null && wait "$HOLDER" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
check() { # DESC CMD...
	local desc=$1
	shift
	if "$@"; then echo "ok: $desc"; else fail "$desc"; fi
}
not() { ! "$@"; }
run() { # ARGS...: RC, $T/out, $T/err; stdin is never a terminal here
	RC=0
	"$CTL" "$@" >"$T/out" 2>"$T/err" </dev/null || RC=$?
}
# expect DESC RC PATTERN ARGS...: the exit status, and (PATTERN not empty)
# exactly one line on stderr, matching PATTERN (grep -E).
expect() {
	local desc=$1 rc=$2 pat=$3 lines
	shift 3
	run "$@"
	if [ "$RC" != "$rc" ]; then
		fail "$desc: exit $RC, expected $rc; stderr: $(cat "$T/err")"
		return
	fi
	if [ -n "$pat" ]; then
		lines=$(wc -l <"$T/err")
		if [ "$lines" != 1 ] || ! grep -Eq -- "$pat" "$T/err"; then
			fail "$desc: stderr is not one line matching '$pat': $(cat "$T/err")"
			return
		fi
	fi
	echo "ok: $desc"
}
fig() { sed -n "s/^$1=//p" "$2"; } # fig NAME FILE: a figure spool-gen printed
HAVE_PY=0
command -v python3 >/dev/null && HAVE_PY=1

S=$T/spool
mkdir "$S"
"$GEN" make "$S" "$T/expect" >"$T/a.fig" || { echo "spool-gen make failed"; exit 1; }
"$GEN" other "$S" >"$T/o.fig" || { echo "spool-gen other failed"; exit 1; }
A=$(fig medium "$T/a.fig") AKEY=$(fig key "$T/a.fig")
AREC=$(fig records "$T/a.fig") AFILES=$(fig files "$T/a.fig")
ABYTES=$(fig pending_bytes "$T/a.fig") ASEGS=$(fig segments "$T/a.fig")
check "the generator made several segments ($ASEGS)" test "$ASEGS" -ge 3

# ---- list ----
expect "list" 0 "" spool list "$S"
check "list names medium A" grep -q "^medium $A\$" "$T/out"
check "list: A's figures" grep -q "pending   .* of writes in $AFILES files, $AREC records, $ASEGS segments" "$T/out"
check "list: A's label and source" grep -q 'label "GEN", 100.0 MiB, from /dev/gen0' "$T/out"
check "list: the oldest segment's time" grep -q "^  oldest    [0-9]\{4\}-" "$T/out"
check "list: the other medium, its tab escaped" grep -q '^medium vfat/ZIP 100 é\\x09x$' "$T/out"
check "list: nothing in use" not grep -q "in use" "$T/out"
if [ "$HAVE_PY" = 1 ]; then
	expect "list --json" 0 "" spool list "$S" --json
	check "list --json: the figures" python3 - "$T/out" "$S" "$A" "$AREC" "$AFILES" "$ABYTES" "$ASEGS" "$AKEY" <<'EOF'
import json, sys
out, spool, a, rec, files, nbytes, segs, key = sys.argv[1:]
d = json.load(open(out))
assert d["spool"] == spool, d["spool"]
media = {m["id"]: m for m in d["media"]}
assert len(media) == 2, media.keys()
m = media[a]
want = {"key": key, "records": int(rec), "files": int(files), "pending_bytes": int(nbytes),
        "segments": int(segs), "held_segments": 0, "set_aside_segments": 0,
        "in_use_pid": None, "damage": None, "label": "GEN", "source": "/dev/gen0",
        "size": 100 << 20}
for k, v in want.items():
    assert m[k] == v, (k, m[k], v)
assert m["oldest"] > 0 and m["oldest_from"] in ("birth", "mtime"), m
assert m["disk_bytes"] > m["pending_bytes"]
o = media["vfat/ZIP 100 \u00e9\tx"]
assert o["records"] == 1 and o["pending_bytes"] == 5, o
EOF
else
	echo "note: no python3: --json not parsed"
fi

# ---- recover ----
expect "recover" 0 "" spool recover "$S" --medium "$A" --to "$T/dest"
check "recover: the tree is exactly the expected one" diff -r "$T/expect" "$T/dest"
check "recover: no file more, none less" \
	test "$(cd "$T/expect" && find . | sort)" = "$(cd "$T/dest" && find . | sort)"
for f in big.bin alloc.bin docs/readme.txt "renamed/new name.txt"; do
	check "recover: size of $f" \
		test "$(stat -c %s "$T/expect/$f")" = "$(stat -c %s "$T/dest/$f")"
done
check "recover: times set" \
	test "$(stat -c %Y "$T/dest/docs/readme.txt")" = 1600000000
check "recover: the unlinked file is gone" test ! -e "$T/dest/tmp/scratch"
check "recover: a note for the KEEP_SIZE fallocate" grep -q "alloc.bin: FALLOCATE with mode 0x1 skipped" "$T/err"
check "recover: a note for times of a file not in DEST" grep -q "missing.txt: not in DEST, times not applied" "$T/err"
check "recover: says the spool is kept" grep -q "the spool is kept: 'slowmediactl spool discard" "$T/out"
check "recover: the summary" grep -q "^recovered [0-9]* records of $AFILES files" "$T/out"
check "recover kept the spool" test -d "$S/$AKEY"
expect "recover into an existing DEST again" 0 "" spool recover "$S" --medium "$A" --to "$T/dest"
check "recover again: the same tree" diff -r "$T/expect" "$T/dest"
expect "recover by the medium's directory name" 0 "" spool recover "$S" --medium "$AKEY" --to "$T/dest-key"
check "recover by key: the same tree" diff -r "$T/expect" "$T/dest-key"

expect "recover: DEST inside the spool" 2 "DEST $S/x is inside the spool directory" \
	spool recover "$S" --medium "$A" --to "$S/x"
expect "recover: DEST is the spool's medium dir" 2 "is inside the spool directory" \
	spool recover "$S" --medium "$A" --to "$S/$AKEY"
expect "recover: DEST holds the spool" 2 "holds the spool directory" \
	spool recover "$S" --medium "$A" --to "$T"
ln -s "$S/$AKEY" "$T/into"
expect "recover: DEST reaching the spool through a symlink and .." 2 "is inside the spool directory" \
	spool recover "$S" --medium "$A" --to "$T/into/../evil"
check "recover refused: nothing made in the spool" test ! -e "$S/x" -a ! -e "$S/evil"
touch "$T/afile"
expect "recover: DEST is a file" 2 "recover: $T/afile: " spool recover "$S" --medium "$A" --to "$T/afile"

# ---- symlinks planted in DEST are never followed ----
"$GEN" escape "$S" >"$T/e.fig" || { echo "spool-gen escape failed"; exit 1; }
E=$(fig medium "$T/e.fig")
mkdir -p "$T/dest2" "$T/outside"
ln -s "$T/outside" "$T/dest2/sub"
ln -s "$T/outside/linked" "$T/dest2/link.txt"
run spool recover "$S" --medium "$E" --to "$T/dest2"
check "escape: recover fails (exit $RC)" test "$RC" = 1
check "escape: nothing written outside DEST" test -z "$(ls -A "$T/outside")"
check "escape: the parent symlink named" grep -q "sub/evil.txt: write not applied: a symbolic link on the way under DEST (not followed)" "$T/err"
check "escape: the file symlink named" grep -q "link.txt: write not applied: a symbolic link" "$T/err"
check "escape: the rename into the symlink refused" grep -q "^slowmediactl: recover: ok.txt: operation not applied: a symbolic link" "$T/err"
check "escape: the rest recovered" test "$(cat "$T/dest2/ok2.txt")" = "fine too"
check "escape: ok.txt left where it was" test "$(cat "$T/dest2/ok.txt")" = "fine"
check "escape: the symlinks are left as they were" test -L "$T/dest2/sub" -a -L "$T/dest2/link.txt"

# ---- damage ----
"$GEN" damage "$S" >"$T/d.fig" || { echo "spool-gen damage failed"; exit 1; }
D=$(fig medium "$T/d.fig") DKEY=$(fig key "$T/d.fig")
expect "list with damage" 0 "" spool list "$S"
check "list names the damage" grep -q "^  damage    0000000000000004.spj: record at [0-9]*: record checksum mismatch" "$T/out"
run spool recover "$S" --medium "$D" --to "$T/dest3"
check "damage: recover fails (exit $RC)" test "$RC" = 1
check "damage: named, and that nothing after it is recovered" grep -q "recover: damage at offset [0-9]*: 0000000000000004.spj: .*nothing after it is recovered" "$T/err"
check "damage: what came before it recovered" test -f "$T/dest3/f3" -a ! -e "$T/dest3/f4" -a ! -e "$T/dest3/f6"
check "damage: recover moved nothing aside" test -f "$S/$DKEY/0000000000000004.spj"
expect "damage: --include-damaged goes on" 0 "" spool recover "$S" --medium "$D" --to "$T/dest4" --include-damaged
check "damage: --include-damaged gets the later segments" test -f "$T/dest4/f8" -a ! -e "$T/dest4/f4"

# ---- the lock ----
"$GEN" hold "$S" "$A" "$T/ready" &
HOLDER=$!
for _ in $(seq 100); do [ -e "$T/ready" ] && break; sleep 0.05; done
check "the holder has the lock" test -e "$T/ready"
expect "recover while the medium is in use" 7 "a daemon is using this medium's spool: .* is in use by another process \(pid $HOLDER\)" \
	spool recover "$S" --medium "$A" --to "$T/dest5"
expect "discard while the medium is in use" 7 "a daemon is using this medium's spool \(pid $HOLDER\)" \
	spool discard "$S" --medium "$A" --yes
if [ -r /proc/self/fd ]; then
	expect "list while in use" 0 "" spool list "$S"
	check "list says who uses it" grep -q "^  in use    by pid $HOLDER\$" "$T/out"
fi
kill "$HOLDER"
wait "$HOLDER" 2>/dev/null
HOLDER=""
check "the spool is all there after all that" test -f "$S/$AKEY/0000000000000001.spj"

# ---- discard ----
expect "discard without --yes and no terminal" 2 "refusing to delete medium $A's spool without --yes" \
	spool discard "$S" --medium "$A"
check "discard refused: nothing deleted" test -d "$S/$AKEY"
if [ "$HAVE_PY" = 1 ]; then
	# on_tty ANSWER ARGS...: slowmediactl on a terminal, ANSWER typed; the
	# terminal's output in $T/tty, the exit status in RC.
	on_tty() {
		RC=0
		python3 - "$@" >"$T/tty" <<'EOF' || RC=$?
import os, pty, sys
answer, args = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(args[0], args)
os.write(fd, (answer + "\n").encode())
out = b""
while True:
    try:
        b = os.read(fd, 4096)
    except OSError:
        break
    if not b:
        break
    out += b
sys.stdout.write(out.decode(errors="replace"))
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
EOF
	}
	on_tty n "$CTL" spool discard "$S" --medium "$A"
	check "discard on a terminal, answered n: exit 1 ($RC)" test "$RC" = 1
	check "discard asks with the figures" grep -q "discard $ABYTES bytes of $AFILES files pending for medium $A? \[y/N\]" "$T/tty"
	check "discard answered n: nothing deleted" test -d "$S/$AKEY"
	on_tty y "$CTL" spool discard "$S" --medium "$A"
	check "discard on a terminal, answered y: exit 0 ($RC)" test "$RC" = 0
	check "discard answered y: gone" test ! -e "$S/$AKEY"
else
	expect "discard --yes" 0 "" spool discard "$S" --medium "$A" --yes
	check "discard --yes: gone" test ! -e "$S/$AKEY"
fi
expect "discard --yes" 0 "" spool discard "$S" --medium "$E" --yes
check "discard says what went" grep -q "^discarded medium $E: $(fig pending_bytes "$T/e.fig") bytes of writes to $(fig files "$T/e.fig") files, 1 segment\$" "$T/out"
check "discard --yes: gone" test ! -e "$S/$(fig key "$T/e.fig")"
expect "list after the discards" 0 "" spool list "$S"
check "list: A and E are gone" not grep -q "^medium \($A\|$E\)\$" "$T/out"
check "list: D and the other are left" test "$(grep -c '^medium ' "$T/out")" = 2

# ---- misuse ----
expect "spool without a subcommand" 2 "spool: no subcommand given" spool
expect "unknown subcommand" 2 "unknown subcommand 'frob'" spool frob "$S"
expect "list without DIR" 2 "list: DIR missing" spool list
expect "list with two DIRs" 2 "list: one DIR only, got 'x' too" spool list "$S" x
expect "recover without --medium" 2 "recover: --medium ID missing" spool recover "$S" --to "$T/d"
expect "recover without --to" 2 "recover: --to DEST missing" spool recover "$S" --medium "$D"
expect "discard without --medium" 2 "discard: --medium ID missing" spool discard "$S" --yes
expect "--medium for list" 2 "list: --medium is for recover and discard" spool list "$S" --medium "$D"
expect "--json for recover" 2 "recover: --json is for list" spool recover "$S" --medium "$D" --to "$T/d" --json
expect "--yes for list" 2 "list: --yes is for discard" spool list "$S" --yes
expect "--to for discard" 2 "discard: --to and --include-damaged are for recover" spool discard "$S" --medium "$D" --to "$T/d"
expect "unknown option" 2 "unknown option '--bogus'" spool list "$S" --bogus
expect "option without its value" 2 "option --medium needs a value" spool discard "$S" --medium
expect "spool after an option" 2 "spool: give it first" --json spool list "$S"
expect "list of no such DIR" 3 "$T/nope: No such file or directory" spool list "$T/nope"
expect "list of a file" 3 "$T/afile: Not a directory" spool list "$T/afile"
expect "recover of no such medium" 3 "no medium 'uuid:nope' in this spool" spool recover "$S" --medium uuid:nope --to "$T/d"
expect "discard in no such DIR" 3 "$T/nope: No such file or directory" spool discard "$T/nope" --medium x --yes
check "misuse made no DEST" test ! -e "$T/d"
expect "spool --help" 0 "" spool --help
check "spool --help lists the subcommands" grep -q "spool recover DIR --medium ID --to DEST" "$T/out"
expect "--help has the spool commands and exit 7" 0 "" --help
check "--help: spool list" grep -q "spool list DIR \[--json\]" "$T/out"
check "--help: exit status 7" grep -q "7 a daemon is using the medium's spool" "$T/out"
expect "list of an empty DIR" 0 "" spool list "$T/outside"
check "list of an empty DIR says so" grep -q "^no media in the spool $T/outside\$" "$T/out"

[ "$FAILED" = 0 ] && echo "PASS" || echo "FAILED"
exit "$FAILED"
