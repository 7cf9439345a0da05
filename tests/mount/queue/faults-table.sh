#!/bin/bash
# The fault matrix of every medium in one table, from the "matrix FSTYPE
# FAULT CHECK RESULT" lines faults.sh prints (in meson's test log, LOG).
# Cells: pass, FAIL, - (does not apply), lower (the lower filesystem never
# reports the fault), "not run" when a medium's test printed nothing.
# usage: faults-table.sh LOG
LOG=${1:?usage: faults-table.sh MESON-TESTLOG}
awk '
$1 == "matrix" && NF == 5 {
	if (!(($3) in seenf)) { seenf[$3] = 1; faults[++nf] = $3 }
	if (!(($4) in seenc)) { seenc[$4] = 1; checks[++nc] = $4 }
	if (!(($2) in seenm)) { seenm[$2] = 1; media[++nm] = $2 }
	cell[$3, $2, $4] = $5
}
END {
	print "== the fault matrix (tests/mount/queue/faults.sh): fault x check, per medium"
	if (!nf) { print "  not run"; exit }
	printf "%-13s %-5s", "fault", "fs"
	for (c = 1; c <= nc; c++) printf " %-7s", checks[c]
	printf "\n"
	for (f = 1; f <= nf; f++)
		for (m = 1; m <= nm; m++) {
			printf "%-13s %-5s", faults[f], media[m]
			for (c = 1; c <= nc; c++) {
				v = cell[faults[f], media[m], checks[c]]
				printf " %-7s", v == "" ? "not run" : v
			}
			printf "\n"
		}
}' "$LOG"
