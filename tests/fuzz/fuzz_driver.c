/*
 * The random-input driver: runs a fuzz target's LLVMFuzzerTestOneInput
 * without libFuzzer (for a machine without clang, and built with the
 * project's own compiler, with ASan/UBSan when it has them).
 *
 *   fuzz-TARGET [-t SECONDS] [-n RUNS] [-s SEED] [-a ARTIFACT_PREFIX] PATH...
 *
 * Every PATH (a corpus directory, or one file: a reproducer) is run once,
 * then RUNS mutated inputs (default: as many as SECONDS allows, 20) made
 * from the corpus with a fixed seed (default 1; the same seed and corpus
 * give the same inputs). No coverage feedback: this finds what random
 * mutations of good inputs find. A failed FUZZ_CHECK, a crash, a sanitizer
 * report or an input that runs longer than 10 s writes the input to
 * ARTIFACT_PREFIX + "crash-N" (or "timeout-N") and fails.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

#define MAX_LEN 8192
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define INPUT_TIMEOUT_S 10

struct input {
	uint8_t *data;
	size_t len;
};

static struct input *corpus;
static size_t ncorpus;
static const uint8_t *cur_data;
static size_t cur_len;
static unsigned long long cur_exec;
static const char *artifact_prefix = "./";

/* ---- saving the input that failed (async-signal-safe) ---- */

static size_t put_str(char *buf, size_t at, size_t cap, const char *s)
{
	while (*s && at + 1 < cap)
		buf[at++] = *s++;
	buf[at] = '\0';
	return at;
}

static void save_current(const char *kind)
{
	char path[4096], num[24];
	size_t at = 0, n = 0;
	unsigned long long v = cur_exec;
	int fd;

	if (!cur_data)
		return;
	do
		num[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	at = put_str(path, at, sizeof(path), artifact_prefix);
	at = put_str(path, at, sizeof(path), kind);
	at = put_str(path, at, sizeof(path), "-");
	while (n && at + 1 < sizeof(path))
		path[at++] = num[--n];
	path[at] = '\0';
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		size_t done = 0;
		while (done < cur_len) {
			ssize_t w = write(fd, cur_data + done, cur_len - done);
			if (w <= 0)
				break;
			done += (size_t)w;
		}
		close(fd);
	}
	(void)!write(2, "fuzz driver: input saved as ", 28);
	(void)!write(2, path, strlen(path));
	(void)!write(2, "\n", 1);
}

static void on_fatal(int sig)
{
	save_current(sig == SIGALRM ? "timeout" : "crash");
	signal(sig, SIG_DFL);
	if (sig == SIGALRM)
		sig = SIGABRT;
	raise(sig);
}

/* ASan and UBSan (halt_on_error) die through this rather than a signal. */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static void on_sanitizer_death(void)
{
	save_current("crash");
}

/* ---- corpus ---- */

static void add_input(const uint8_t *data, size_t len)
{
	corpus = realloc(corpus, (ncorpus + 1) * sizeof(*corpus));
	corpus[ncorpus].data = malloc(len ? len : 1);
	memcpy(corpus[ncorpus].data, data, len);
	corpus[ncorpus].len = len;
	ncorpus++;
}

static int load_file(const char *path)
{
	uint8_t *buf = malloc(MAX_LEN);
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
		free(buf);
		return -1;
	}
	while (len < MAX_LEN && (n = read(fd, buf + len, MAX_LEN - len)) > 0)
		len += (size_t)n;
	close(fd);
	add_input(buf, len);
	free(buf);
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_path(const char *path)
{
	struct stat st;
	DIR *d;
	struct dirent *e;
	char **names = NULL;
	size_t n = 0;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return load_file(path);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
		sprintf(names[n], "%s/%s", path, e->d_name);
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names); /* the same order everywhere */
	for (size_t i = 0; i < n; i++) {
		if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
			load_file(names[i]);
		free(names[i]);
	}
	free(names);
	return 0;
}

/* ---- mutations ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* splitmix64: small, and the same sequence on every machine. */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static size_t below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

static size_t ntokens(void)
{
	size_t n = 0;

	while (fuzz_driver_tokens[n])
		n++;
	return n;
}

static void insert(uint8_t *buf, size_t *len, size_t at, const uint8_t *src, size_t n)
{
	if (*len + n > MAX_LEN)
		n = MAX_LEN - *len;
	memmove(buf + at + n, buf + at, *len - at);
	memcpy(buf + at, src, n);
	*len += n;
}

static void mutate_once(uint8_t *buf, size_t *len)
{
	static const uint8_t special[] = {0, 0xff, '\n', ' ', '=', '%', ',', '-', '/', '\\',
					  '0', '9', 'a', 'A', '\t', 0x7f, 0x80};
	size_t at = below(*len + 1), n, nt = ntokens();
	uint8_t tmp[MAX_LEN];

	switch (below(11)) {
	case 0: /* flip a bit */
		if (*len)
			buf[below(*len)] ^= (uint8_t)(1u << below(8));
		break;
	case 1: /* a random byte */
		if (*len)
			buf[below(*len)] = (uint8_t)rnd();
		break;
	case 2: /* a byte that means something to a parser */
		if (*len)
			buf[below(*len)] = special[below(sizeof(special))];
		break;
	case 3: /* insert random bytes */
		n = 1 + below(8);
		for (size_t i = 0; i < n; i++)
			tmp[i] = (uint8_t)rnd();
		insert(buf, len, at, tmp, n);
		break;
	case 4: /* erase a range */
		if (at < *len) {
			n = 1 + below(MIN(*len - at, 16));
			memmove(buf + at, buf + at + n, *len - at - n);
			*len -= n;
		}
		break;
	case 5: /* duplicate a range */
		if (*len) {
			size_t from = below(*len);
			n = 1 + below(MIN(*len - from, 64));
			memcpy(tmp, buf + from, n);
			insert(buf, len, at, tmp, n);
		}
		break;
	case 6: case 7: /* a token */
		if (nt) {
			const char *t = fuzz_driver_tokens[below(nt)];
			insert(buf, len, at, (const uint8_t *)t, strlen(t));
		}
		break;
	case 8: /* a piece of another input */
		if (ncorpus) {
			const struct input *o = &corpus[below(ncorpus)];
			if (o->len) {
				size_t from = below(o->len);
				n = 1 + below(o->len - from);
				insert(buf, len, at, o->data + from, n);
			}
		}
		break;
	case 9: /* cut the end */
		*len = below(*len + 1);
		break;
	case 10: /* a long run of one byte: lengths and limits */
		n = 1 + below(below(2) ? 64 : 4200);
		memset(tmp, below(2) ? 'x' : special[below(sizeof(special))], n);
		insert(buf, len, at, tmp, n);
		break;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_one(const uint8_t *data, size_t len)
{
	/* A copy of exactly len bytes: the sanitizers see any read past its end. */
	uint8_t *copy = malloc(len ? len : 1);

	memcpy(copy, data, len);
	cur_data = copy;
	cur_len = len;
	alarm(INPUT_TIMEOUT_S);
	LLVMFuzzerTestOneInput(copy, len);
	alarm(0);
	cur_data = NULL;
	free(copy);
	cur_exec++;
}

int main(int argc, char **argv)
{
	double budget = 20, t0;
	unsigned long long runs = ULLONG_MAX, mutated = 0, seed = 1;
	uint8_t buf[MAX_LEN];
	int opt;

	while ((opt = getopt(argc, argv, "t:n:s:a:")) != -1) {
		switch (opt) {
		case 't': budget = strtod(optarg, NULL); break;
		case 'n': runs = strtoull(optarg, NULL, 10); break;
		case 's': seed = strtoull(optarg, NULL, 10); break;
		case 'a': artifact_prefix = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-t SECONDS] [-n RUNS] [-s SEED] [-a PREFIX] PATH...\n",
				argv[0]);
			return 2;
		}
	}
	if (*artifact_prefix && artifact_prefix[strlen(artifact_prefix) - 1] == '/')
		mkdir(artifact_prefix, 0755); /* one level; it may exist */
	signal(SIGSEGV, on_fatal);
	signal(SIGBUS, on_fatal);
	signal(SIGFPE, on_fatal);
	signal(SIGILL, on_fatal);
	signal(SIGABRT, on_fatal);
	signal(SIGALRM, on_fatal);
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(on_sanitizer_death);
	for (int i = optind; i < argc; i++)
		if (load_path(argv[i]) < 0)
			return 2;
	t0 = now_s();
	for (size_t i = 0; i < ncorpus; i++)
		run_one(corpus[i].data, corpus[i].len);
	printf("fuzz driver: %zu corpus inputs passed\n", ncorpus);
	rng_state = seed;
	while (mutated < runs && (mutated & 63 || now_s() - t0 < budget)) {
		size_t len = 0;
		if (ncorpus && below(8)) {
			const struct input *base = &corpus[below(ncorpus)];
			len = base->len;
			memcpy(buf, base->data, len);
		}
		for (size_t k = 1 + below(below(4) ? 4 : 16); k; k--)
			mutate_once(buf, &len);
		run_one(buf, len);
		mutated++;
	}
	printf("fuzz driver: stat::number_of_executed_units: %llu (%zu corpus + %llu mutated, seed %llu) in %.1f s\n",
	       cur_exec, ncorpus, mutated, seed, now_s() - t0);
	for (size_t i = 0; i < ncorpus; i++)
		free(corpus[i].data);
	free(corpus);
	return 0;
}
