/*
 * Shared by the fuzz targets (fuzz_options.c, fuzz_ctl_proto.c) and the
 * random-input driver (fuzz_driver.c) that runs them without libFuzzer.
 *
 * A target is one LLVMFuzzerTestOneInput. It must not keep state between
 * inputs (beyond one-time set-up), must free all it allocates (the
 * sanitizers' leak check runs), and states what it expects with FUZZ_CHECK:
 * a false check prints what was expected and aborts, which libFuzzer and the
 * driver both report as a crash and save the input for.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Words the random driver splices into its mutations (NULL-terminated); the
 * libFuzzer build has the same in tests/fuzz/TARGET.dict. */
extern const char *const fuzz_driver_tokens[];

#define FUZZ_CHECK(cond, ...)                                                          \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                  \
			fputc('\n', stderr);                                           \
			abort();                                                       \
		}                                                                      \
	} while (0)
