/* The /dev/fuse hooks: FUSE_HANDLE_KILLPRIV_V2 is added to the INIT reply only
 * when the kernel offered it and init wanted it, and each request's kill
 * flag reaches the thread that read it. Requests and replies go through a
 * pipe, as they would through the device. */
#include <check.h>
#include <linux/fuse.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs.h"

#define INIT_UNIQUE 2

struct rig {
	struct slowmedia fs;
	struct fuse_custom_io io;
	int p[2];
};

static void rig_up(struct rig *r)
{
	memset(r, 0, sizeof(*r));
	devio_hooks(&r->io);
	ck_assert_int_eq(pipe(r->p), 0);
}

static void rig_down(struct rig *r)
{
	close(r->p[0]);
	close(r->p[1]);
}

/* Sends one request (header and argument) and lets the read hook take it. */
static void request(struct rig *r, uint32_t opcode, uint64_t unique, const void *arg,
		    size_t size)
{
	char buf[512];
	struct fuse_in_header h = {.len = (uint32_t)(sizeof(h) + size), .opcode = opcode,
				   .unique = unique};

	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), arg, size);
	ck_assert_int_eq(write(r->p[1], buf, h.len), (ssize_t)h.len);
	ck_assert_int_eq(r->io.read(r->p[0], buf, sizeof(buf), &r->fs), (ssize_t)h.len);
}

static void init_request(struct rig *r, uint32_t minor, uint32_t flags)
{
	struct fuse_init_in in = {.major = FUSE_KERNEL_VERSION, .minor = minor, .flags = flags};

	request(r, FUSE_INIT, INIT_UNIQUE, &in, sizeof(in));
}

/* Sends an INIT reply with flags through the writev hook; the flags that came out. */
static uint32_t init_reply(struct rig *r, uint32_t flags)
{
	struct fuse_init_out out = {.major = FUSE_KERNEL_VERSION, .minor = 31, .flags = flags};
	struct fuse_out_header h = {.len = sizeof(h) + sizeof(out), .unique = INIT_UNIQUE};
	struct iovec iov[2] = {{&h, sizeof(h)}, {&out, sizeof(out)}};
	char back[sizeof(h) + sizeof(out)];

	ck_assert_int_eq(r->io.writev(r->p[1], iov, 2, &r->fs), (ssize_t)sizeof(back));
	ck_assert_int_eq(read(r->p[0], back, sizeof(back)), (ssize_t)sizeof(back));
	memcpy(&out, back + sizeof(h), sizeof(out));
	ck_assert_uint_eq(out.max_write, 0); /* the rest as it was */
	return out.flags;
}

START_TEST(init_takes_the_flag_when_offered)
{
	struct rig r;

	rig_up(&r);
	init_request(&r, 45, FUSE_HANDLE_KILLPRIV_V2 | FUSE_POSIX_ACL);
	ck_assert(devio_want_killpriv_v2(&r.fs));
	ck_assert_uint_eq(init_reply(&r, FUSE_POSIX_ACL),
			  FUSE_HANDLE_KILLPRIV_V2 | FUSE_POSIX_ACL);
	ck_assert(devio_killpriv_v2_on(&r.fs));
	/* Later replies pass as they are. */
	ck_assert_uint_eq(init_reply(&r, FUSE_POSIX_ACL), FUSE_POSIX_ACL);
	rig_down(&r);
}
END_TEST

START_TEST(init_without_the_offer_is_left_alone)
{
	struct rig r;

	rig_up(&r);
	init_request(&r, 45, FUSE_POSIX_ACL);
	ck_assert(!devio_want_killpriv_v2(&r.fs));
	ck_assert_uint_eq(init_reply(&r, FUSE_POSIX_ACL), FUSE_POSIX_ACL);
	ck_assert(!devio_killpriv_v2_on(&r.fs));
	/* A kernel too old for it, whatever its flags say. */
	init_request(&r, 32, FUSE_HANDLE_KILLPRIV_V2);
	ck_assert(!devio_want_killpriv_v2(&r.fs));
	rig_down(&r);
}
END_TEST

START_TEST(kill_flags_reach_the_reader)
{
	struct rig r;
	struct fuse_write_in w = {.write_flags = FUSE_WRITE_KILL_SUIDGID};
	struct fuse_setattr_in s = {.valid = FATTR_SIZE | FATTR_KILL_SUIDGID};
	struct fuse_open_in o = {.open_flags = FUSE_OPEN_KILL_SUIDGID};

	rig_up(&r);
	request(&r, FUSE_WRITE, 10, &w, sizeof(w));
	ck_assert(devio_req_kill_suidgid());
	w.write_flags = 0;
	request(&r, FUSE_WRITE, 12, &w, sizeof(w));
	ck_assert(!devio_req_kill_suidgid());
	request(&r, FUSE_SETATTR, 14, &s, sizeof(s));
	ck_assert(devio_req_kill_suidgid());
	s.valid = FATTR_SIZE;
	request(&r, FUSE_SETATTR, 16, &s, sizeof(s));
	ck_assert(!devio_req_kill_suidgid());
	request(&r, FUSE_OPEN, 18, &o, sizeof(o));
	ck_assert(devio_req_kill_suidgid());
	/* Any other request clears it. */
	request(&r, FUSE_GETATTR, 20, &(struct fuse_getattr_in){0}, sizeof(struct fuse_getattr_in));
	ck_assert(!devio_req_kill_suidgid());
	/* A truncated request carries no flag. */
	request(&r, FUSE_WRITE, 22, &w, 8);
	ck_assert(!devio_req_kill_suidgid());
	rig_down(&r);
}
END_TEST

static Suite *devio_suite(void)
{
	Suite *s = suite_create("devio");
	TCase *tc = tcase_create("hooks");

	tcase_add_test(tc, init_takes_the_flag_when_offered);
	tcase_add_test(tc, init_without_the_offer_is_left_alone);
	tcase_add_test(tc, kill_flags_reach_the_reader);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(devio_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
