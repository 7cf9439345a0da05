/* Chunk sizing, bandwidth estimate, rate cap and read gate, with the clock injected. */
#include <check.h>
#include <glib.h>
#include <stdbool.h>
#include <stdlib.h>

#include "pacer.h"

#define MiB (1ull << 20)
#define T0 (5 * NSEC_PER_SEC) /* an arbitrary monotonic time */

/* What the chunk size should be for a bandwidth and a latency target, exactly. */
static size_t want_chunk(uint64_t bw_bps, unsigned latency_ms)
{
	unsigned __int128 b = (unsigned __int128)bw_bps * latency_ms / 1000;

	if (b < CHUNK_MIN_BYTES)
		return CHUNK_MIN_BYTES;
	if (b > CHUNK_MAX_BYTES)
		return CHUNK_MAX_BYTES;
	return (size_t)b & ~(size_t)4095;
}

START_TEST(test_chunk_before_samples)
{
	static const unsigned lat[] = {1, 100, 1000, 60000};
	struct pacer p;

	for (unsigned i = 0; i < G_N_ELEMENTS(lat); i++) {
		pacer_init(&p, 0, lat[i]);
		ck_assert_uint_eq(pacer_chunk_bytes(&p, false), CHUNK_MIN_BYTES);
		ck_assert_int_eq(pacer_delay_ns(&p, T0), 0);
	}
}
END_TEST

START_TEST(test_chunk_from_first_sample)
{
	struct pacer p;

	pacer_init(&p, 0, 100);
	pacer_done(&p, MiB, T0, T0 + 100 * NSEC_PER_MSEC, false); /* 10 MiB/s */
	ck_assert_uint_eq(p.bw_bps, 10 * MiB);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), MiB);

	pacer_init(&p, 0, 100);
	pacer_done(&p, CHUNK_MIN_BYTES, T0, T0 + NSEC_PER_SEC, false); /* slow: clamped up */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), CHUNK_MIN_BYTES);

	pacer_init(&p, 0, 100);
	pacer_done(&p, CHUNK_MAX_BYTES, T0, T0 + NSEC_PER_MSEC, false); /* fast: clamped down */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), CHUNK_MAX_BYTES);

	pacer_init(&p, 0, 333);
	pacer_done(&p, 1000000, T0, T0 + NSEC_PER_SEC, false); /* 333000 bytes: not aligned */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), 331776);
}
END_TEST

/* bw x latency, clamped and 4 KiB-aligned, over the whole range options allow. */
START_TEST(test_chunk_formula)
{
	static const unsigned lat[] = {1, 20, 100, 333, 1000, 10000, 60000};
	static const uint64_t bw[] = {
	    1,	       4096,	  65536,	 1000000,	10 * MiB,      123456789,
	    307500293, 400 * MiB, 1000000000ull, 4000000000ull, 10000000000ull};
	struct pacer p;

	for (unsigned i = 0; i < G_N_ELEMENTS(lat); i++) {
		for (unsigned j = 0; j < G_N_ELEMENTS(bw); j++) {
			size_t got;

			pacer_init(&p, 0, lat[i]);
			p.bw_bps = bw[j]; /* as if measured */
			got = pacer_chunk_bytes(&p, false);
			ck_assert_msg(got == want_chunk(bw[j], lat[i]),
				      "bw %llu B/s, latency %u ms: chunk %zu, want %zu",
				      (unsigned long long)bw[j], lat[i], got,
				      want_chunk(bw[j], lat[i]));
			ck_assert_uint_eq(got % 4096, 0);
		}
	}
}
END_TEST

START_TEST(test_ewma)
{
	struct pacer p;
	uint64_t prev;

	pacer_init(&p, 0, 100);
	pacer_done(&p, 10000000, T0, T0 + 100 * NSEC_PER_MSEC, false); /* 1e8 B/s */
	ck_assert_uint_eq(p.bw_bps, 100000000);
	pacer_done(&p, 20000000, T0,
		   T0 + 100 * NSEC_PER_MSEC, false); /* 2e8 B/s: 30% of the way */
	ck_assert_uint_eq(p.bw_bps, 130000000);
	prev = p.bw_bps;
	for (int i = 0; i < 30; i++) {
		pacer_done(&p, 20000000, T0, T0 + 100 * NSEC_PER_MSEC, false);
		ck_assert_uint_gt(p.bw_bps, prev);
		ck_assert_uint_le(p.bw_bps, 200000000);
		prev = p.bw_bps;
	}
	ck_assert_uint_ge(p.bw_bps, 199000000);
	/* And back down. */
	pacer_done(&p, 5000000, T0, T0 + 100 * NSEC_PER_MSEC, false);
	ck_assert_uint_lt(p.bw_bps, prev);
	ck_assert_uint_gt(p.bw_bps, 50000000);
}
END_TEST

START_TEST(test_no_sample_from_tiny_or_instant_chunks)
{
	struct pacer p;

	pacer_init(&p, 0, 100);
	pacer_done(&p, 4096, T0, T0 + NSEC_PER_SEC, false);	/* too small to measure */
	pacer_done(&p, CHUNK_MAX_BYTES, T0, T0, false);	/* no time elapsed */
	pacer_done(&p, CHUNK_MAX_BYTES, T0, T0 - 1000, false); /* clock went backwards */
	ck_assert_uint_eq(p.bw_bps, 0);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), CHUNK_MIN_BYTES);
}
END_TEST

START_TEST(test_rate_bounds_chunk)
{
	struct pacer p;

	pacer_init(&p, MiB, 100);
	/* No sample yet: the rate alone sizes the chunk. */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), want_chunk(MiB, 100));
	pacer_done(&p, CHUNK_MAX_BYTES, T0,
		   T0 + 10 * NSEC_PER_MSEC, false); /* medium: ~840 MB/s */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), want_chunk(MiB, 100));
	ck_assert_uint_le(pacer_chunk_bytes(&p, false), MiB / 10);

	/* A medium slower than the rate: the medium sizes the chunk. */
	pacer_init(&p, 100 * MiB, 100);
	pacer_done(&p, MiB, T0, T0 + 100 * NSEC_PER_MSEC, false); /* 10 MiB/s */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), MiB);

	pacer_init(&p, MiB, 50); /* 52428 bytes: clamped up */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), CHUNK_MIN_BYTES);
}
END_TEST

/* Run chunks back to back as a flusher would, each taking write_ns; return when
 * the chunk after the last one may start. */
static int64_t run_chunks(struct pacer *p, int n, size_t bytes, int64_t write_ns,
			  int64_t *delays)
{
	int64_t now = T0;

	for (int i = 0; i < n; i++) {
		int64_t d = pacer_delay_ns(p, now);

		ck_assert_int_ge(d, 0);
		delays[i] = d;
		now += d;
		ck_assert_int_eq(pacer_delay_ns(p, now), 0);
		pacer_done(p, bytes, now, now + write_ns, false);
		now += write_ns;
	}
	return now + pacer_delay_ns(p, now);
}

START_TEST(test_rate_spacing)
{
	const int64_t per_chunk = 62500 * 1000ll; /* 64 KiB at 1 MiB/s: 62.5 ms */
	struct pacer p;
	int64_t delays[10], total = 0, next;

	pacer_init(&p, MiB, 50);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), 64 << 10);
	next = run_chunks(&p, 10, 64 << 10, 0, delays);
	ck_assert_int_eq(delays[0], 0);
	for (int i = 1; i < 10; i++) {
		ck_assert_int_eq(delays[i], per_chunk);
		total += delays[i];
	}
	total += next - (T0 + total);		 /* the wait before an 11th chunk */
	ck_assert_int_eq(total, 10 * per_chunk); /* 0.625 s */
	ck_assert_int_eq(next - T0, 625 * NSEC_PER_MSEC);

	/* Writing takes time too: the waits shrink, the spacing stays. */
	pacer_init(&p, MiB, 50);
	next = run_chunks(&p, 10, 64 << 10, 10 * NSEC_PER_MSEC, delays);
	for (int i = 1; i < 10; i++)
		ck_assert_int_eq(delays[i], per_chunk - 10 * NSEC_PER_MSEC);
	ck_assert_int_eq(next - T0, 625 * NSEC_PER_MSEC);

	/* A medium slower than the rate is never held back. */
	pacer_init(&p, MiB, 50);
	next = run_chunks(&p, 10, 64 << 10, 100 * NSEC_PER_MSEC, delays);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(delays[i], 0);
	ck_assert_int_eq(next - T0, NSEC_PER_SEC);

	/* No rate: never a delay. */
	pacer_init(&p, 0, 50);
	run_chunks(&p, 10, 64 << 10, 0, delays);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(delays[i], 0);
}
END_TEST

START_TEST(test_rate_idle_burst)
{
	const int64_t per_chunk = 62500 * 1000ll;
	struct pacer p;
	int64_t now = T0;

	pacer_init(&p, MiB, 50);
	pacer_done(&p, 64 << 10, now, now, false);
	now += 100 * NSEC_PER_SEC; /* long idle */
	ck_assert_int_eq(pacer_delay_ns(&p, now), 0);
	pacer_done(&p, 64 << 10, now, now, false);
	/* The idle time bought one chunk, not more. */
	ck_assert_int_eq(pacer_delay_ns(&p, now), per_chunk);
	ck_assert_int_eq(pacer_delay_ns(&p, now + per_chunk / 2), per_chunk / 2);
	ck_assert_int_eq(pacer_delay_ns(&p, now + per_chunk), 0);
}
END_TEST

/* A chunk after a read pays the head's move: learnt apart, taken off its budget. */
START_TEST(test_seek_learnt)
{
	const int64_t ms = NSEC_PER_MSEC;
	struct pacer p;
	int64_t t = T0;

	pacer_init(&p, 0, 100);
	pacer_done(&p, 200000, t, t + 100 * ms, false); /* 2 MB/s */
	ck_assert_uint_eq(p.bw_bps, 2000000);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, true), want_chunk(2000000, 100));
	/* 196608 bytes take 98.3 ms; 80 ms more is the seek. */
	pacer_done(&p, 196608, t, t + 98304 * 1000 + 80 * ms, true);
	ck_assert_int_eq(p.seek_ns, 80 * ms);
	ck_assert_uint_eq(p.bw_bps, 2000000); /* not dragged down by the seek */
	/* 20 ms left of the budget: 40000 bytes, clamped up. */
	ck_assert_uint_eq(pacer_chunk_bytes(&p, true), CHUNK_MIN_BYTES);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, false), want_chunk(2000000, 100));
	/* A slower bandwidth sample still counts; the seek estimate follows its samples. */
	pacer_done(&p, CHUNK_MIN_BYTES, t, t + 32768 * 1000 + 40 * ms, true);
	ck_assert_int_eq(p.seek_ns, 60 * ms);
	pacer_init(&p, 0, 50);
	pacer_done(&p, 100000, t, t + 50 * ms, false);
	pacer_done(&p, 100000, t, t + 500 * ms, true); /* capped at latency= */
	ck_assert_int_eq(p.seek_ns, 50 * ms);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, true), CHUNK_MIN_BYTES);
}
END_TEST

/* Files written in turn: every chunk seeks, and that is the medium's pace. */
START_TEST(test_seek_as_norm)
{
	const int64_t ms = NSEC_PER_MSEC;
	struct pacer p;
	int64_t t = T0;

	pacer_init(&p, 0, 100);
	pacer_done(&p, 200000, t, t + 100 * ms, false);
	for (int i = 0; i < 3; i++) {
		pacer_done(&p, 100000, t, t + 130 * ms, true);
		ck_assert_int_eq(p.seek_ns, 80 * ms);
		ck_assert_uint_eq(p.bw_bps, 2000000);
	}
	/* The fourth in a row: seeking is the norm now, it feeds the bandwidth. */
	pacer_done(&p, 100000, t, t + 130 * ms, true);
	ck_assert_int_eq(p.seek_ns, 0);
	pacer_done(&p, 100000, t, t + 130 * ms, true);
	ck_assert_uint_lt(p.bw_bps, 2000000);
	ck_assert_int_eq(p.seek_ns, 0);
	ck_assert_uint_eq(pacer_chunk_bytes(&p, true), want_chunk(p.bw_bps, 100));
	/* A contiguous chunk ends the run: seeks are learnt apart again. */
	pacer_done(&p, 200000, t, t + 100 * ms, false);
	pacer_done(&p, 100000, t, t + 130 * ms, true);
	ck_assert_int_gt(p.seek_ns, 0);
}
END_TEST

START_TEST(test_runs)
{
	struct pacer p;

	/* Before any gathered chunk: a probe of RUNS_PROBE. */
	pacer_init(&p, 0, 100);
	ck_assert_uint_eq(pacer_runs_max(&p), RUNS_PROBE);
	pacer_done(&p, MiB, T0, T0 + 10 * NSEC_PER_MSEC, false); /* 100 MiB/s */
	ck_assert_uint_eq(pacer_runs_max(&p), RUNS_PROBE);
	/* A disk that does not seek: 4 runs of 4 KiB in 1 ms, 40 us of transfer,
	 * 320 us a run: (50 ms / 320 us) + 1 = 157, clamped. */
	pacer_done_runs(&p, 16384, T0, T0 + NSEC_PER_MSEC, true, 4);
	ck_assert_int_eq(p.run_ns, (NSEC_PER_MSEC - 16384ll * NSEC_PER_SEC / (100 * MiB)) / 3);
	ck_assert_uint_eq(pacer_runs_max(&p), CHUNK_RUNS_MAX);
	/* ... nor feeds the bandwidth */
	ck_assert_uint_eq(p.bw_bps, 100 * MiB);
	/* An optical head: 4 runs in 400 ms, about 130 ms each (EWMA of half),
	 * more than half of latency=: one run a chunk... */
	for (int i = 0; i < 8; i++)
		pacer_done_runs(&p, 16384, T0, T0 + 400 * NSEC_PER_MSEC, true, 4);
	ck_assert_uint_eq(pacer_runs_max(&p), 1);
	/* ... but a probe of two after RUNS_REPROBE single-run chunks. */
	for (int i = 0; i < RUNS_REPROBE - 1; i++)
		pacer_done(&p, MiB, T0, T0 + 10 * NSEC_PER_MSEC, false);
	ck_assert_uint_eq(pacer_runs_max(&p), 1);
	pacer_done(&p, MiB, T0, T0 + 10 * NSEC_PER_MSEC, false);
	ck_assert_uint_eq(pacer_runs_max(&p), 2);
	/* Runs of 9 ms with latency=100: 1 + 50/9 = 6. */
	for (int i = 0; i < 16; i++)
		pacer_done_runs(&p, 8192, T0, T0 + 9 * NSEC_PER_MSEC + 8192ll * NSEC_PER_SEC / p.bw_bps,
				true, 2);
	ck_assert_uint_eq(pacer_runs_max(&p), 6);
}
END_TEST

START_TEST(test_runs_seed_bandwidth)
{
	struct pacer p;

	/* Only gathered chunks so far: they give the first (low) estimate. */
	pacer_init(&p, 0, 100);
	pacer_done_runs(&p, MiB, T0, T0 + 100 * NSEC_PER_MSEC, true, 8);
	ck_assert_uint_eq(p.bw_bps, 10 * MiB);
	/* A tiny one does not. */
	pacer_init(&p, 0, 100);
	pacer_done_runs(&p, 8192, T0, T0 + NSEC_PER_MSEC, true, 2);
	ck_assert_uint_eq(p.bw_bps, 0);
}
END_TEST

START_TEST(test_gate_no_reads)
{
	struct readgate g;

	readgate_init(&g, 20);
	ck_assert_int_eq(readgate_wait_ns(&g, T0), 0);
	ck_assert_int_eq(readgate_wait_ns(&g, 1), 0);
}
END_TEST

START_TEST(test_gate_grace)
{
	const int64_t grace = 20 * NSEC_PER_MSEC;
	struct readgate g;

	readgate_init(&g, 20);
	readgate_enter(&g);
	ck_assert_int_gt(readgate_wait_ns(&g, T0), 0);
	ck_assert_int_gt(readgate_wait_ns(&g, T0 + 3600 * NSEC_PER_SEC), 0);
	readgate_leave(&g, T0 + NSEC_PER_SEC);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + NSEC_PER_SEC), grace);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + NSEC_PER_SEC + 5 * NSEC_PER_MSEC),
			 15 * NSEC_PER_MSEC);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + NSEC_PER_SEC + grace - 1), 1);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + NSEC_PER_SEC + grace), 0);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + 2 * NSEC_PER_SEC), 0);
}
END_TEST

START_TEST(test_gate_meta)
{
	const int64_t grace = 20 * NSEC_PER_MSEC;
	struct readgate g;

	readgate_init(&g, 20);
	/* Served from the caches: flushing resumes at once. */
	readgate_enter(&g);
	ck_assert_int_gt(readgate_wait_ns(&g, T0), 0);
	readgate_leave_timed(&g, T0, T0 + META_MEDIUM_NS - 1);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + META_MEDIUM_NS - 1), 0);
	/* Went to the medium: the next step of the walk gets the grace. */
	readgate_enter(&g);
	readgate_leave_timed(&g, T0, T0 + 80 * NSEC_PER_MSEC);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + 80 * NSEC_PER_MSEC), grace);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + 80 * NSEC_PER_MSEC + grace), 0);
	/* A slow op that ended before a later read does not pull the grace back. */
	readgate_enter(&g);
	readgate_enter(&g);
	readgate_leave(&g, T0 + NSEC_PER_SEC);
	readgate_leave_timed(&g, T0, T0 + NSEC_PER_SEC - 1);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + NSEC_PER_SEC), grace);
	/* A cached one keeps a pending grace as it is. */
	readgate_enter(&g);
	readgate_leave_timed(&g, T0 + NSEC_PER_SEC + 5, T0 + NSEC_PER_SEC + 10);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + NSEC_PER_SEC), grace);
}
END_TEST

START_TEST(test_gate_overlapping_reads)
{
	struct readgate g;

	readgate_init(&g, 20);
	readgate_enter(&g);
	readgate_enter(&g);
	readgate_leave(&g, T0);
	ck_assert_int_gt(readgate_wait_ns(&g, T0 + NSEC_PER_SEC),
			 0); /* one still active */
	readgate_leave(&g, T0 + 2 * NSEC_PER_SEC);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + 2 * NSEC_PER_SEC), 20 * NSEC_PER_MSEC);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + 3 * NSEC_PER_SEC), 0);
}
END_TEST

START_TEST(test_gate_no_grace)
{
	struct readgate g;

	readgate_init(&g, 0);
	readgate_enter(&g);
	ck_assert_int_gt(readgate_wait_ns(&g, T0), 0);
	readgate_leave(&g, T0);
	ck_assert_int_eq(readgate_wait_ns(&g, T0), 0);
	ck_assert_int_eq(readgate_wait_ns(&g, T0 + 1), 0);
}
END_TEST

static Suite *pacer_suite(void)
{
	Suite *s = suite_create("pacer");
	TCase *tc = tcase_create("pacer");
	TCase *gate = tcase_create("readgate");

	tcase_add_test(tc, test_chunk_before_samples);
	tcase_add_test(tc, test_chunk_from_first_sample);
	tcase_add_test(tc, test_chunk_formula);
	tcase_add_test(tc, test_ewma);
	tcase_add_test(tc, test_no_sample_from_tiny_or_instant_chunks);
	tcase_add_test(tc, test_rate_bounds_chunk);
	tcase_add_test(tc, test_rate_spacing);
	tcase_add_test(tc, test_rate_idle_burst);
	tcase_add_test(tc, test_seek_learnt);
	tcase_add_test(tc, test_seek_as_norm);
	tcase_add_test(tc, test_runs);
	tcase_add_test(tc, test_runs_seed_bandwidth);
	suite_add_tcase(s, tc);

	tcase_add_test(gate, test_gate_no_reads);
	tcase_add_test(gate, test_gate_grace);
	tcase_add_test(gate, test_gate_meta);
	tcase_add_test(gate, test_gate_overlapping_reads);
	tcase_add_test(gate, test_gate_no_grace);
	suite_add_tcase(s, gate);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pacer_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
