/* fsx: the slowmedia daemon under test: mount, unmount, wait for its drain. */

#include "fsx.h"

#define MOUNT_TIMEOUT_MS 10000
#define DRAIN_TIMEOUT_MS 300000
#define DRAIN_SLACK_MS 10000
#define DEFAULT_QUEUE_BYTES (64u << 20) /* slowmedia's queue= default */
#define UMOUNT_BUSY_RETRIES 50
#define POLL_MS 20

/* For the signal handler and the watchdog in fsx.c: what to tear down. */
volatile pid_t sig_daemon_pid;
char sig_mnt[PATH_MAX];

void dump_daemon_threads(pid_t pid)
{
	g_autofree char *taskdir = g_strdup_printf("/proc/%d/task", (int)pid);
	g_autoptr(GDir) d = g_dir_open(taskdir, 0, NULL);
	const char *tid;

	printf("daemon %d threads (comm, wchan, kernel stack):\n", (int)pid);
	while (d && (tid = g_dir_read_name(d))) {
		g_autofree char *comm = NULL, *wchan = NULL, *stack = NULL;
		g_autofree char *p1 = g_strdup_printf("%s/%s/comm", taskdir, tid);
		g_autofree char *p2 = g_strdup_printf("%s/%s/wchan", taskdir, tid);
		g_autofree char *p3 = g_strdup_printf("%s/%s/stack", taskdir, tid);

		g_file_get_contents(p1, &comm, NULL, NULL);
		g_file_get_contents(p2, &wchan, NULL, NULL);
		g_file_get_contents(p3, &stack, NULL, NULL);
		printf("  %s %s %s\n", tid, comm ? g_strstrip(comm) : "?",
		       wchan ? wchan : "?");
		if (stack && *stack)
			printf("%s", stack);
	}
}

/* ---- the daemon ---- */

static bool is_mounted(const char *mnt)
{
	FILE *f = fopen("/proc/self/mounts", "r");
	char line[PATH_MAX * 2 + 256], src[PATH_MAX], dir[PATH_MAX], type[64];
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%4095s %4095s %63s", src, dir, type) == 3 &&
			!strcmp(dir, mnt) && !strcmp(type, "fuse.slowmedia");
	if (f)
		fclose(f);
	return found;
}

static void print_daemon_log(const struct fsx *x)
{
	g_autofree char *text = NULL;

	if (g_file_get_contents(x->daemon_log, &text, NULL, NULL) && *text)
		printf("daemon output (%s):\n%s", x->daemon_log, text);
}

static void write_pidfile(const struct fsx *x, pid_t pid)
{
	g_autofree char *s = g_strdup_printf("%d\n", (int)pid);

	if (pid)
		g_file_set_contents(x->pidfile, s, -1, NULL);
	else
		unlink(x->pidfile);
}

static pid_t spawn_daemon(const struct fsx *x)
{
	pid_t pid = fork();
	int fd;

	if (pid != 0)
		return pid;
	fd = open(x->daemon_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	if (x->config[0])
		execl(x->daemon, x->daemon, x->lower, x->dir, "-f", "-o", x->config,
		      (char *)NULL);
	else
		execl(x->daemon, x->daemon, x->lower, x->dir, "-f", (char *)NULL);
	fprintf(stderr, "exec %s: %s\n", x->daemon, strerror(errno));
	_exit(127);
}

bool daemon_start(struct fsx *x)
{
	int64_t deadline = now_ns() + (int64_t)MOUNT_TIMEOUT_MS * 1000000;
	struct stat st;
	int status;

	path_fmt(x->daemon_log, "%s/daemon.%u.log", x->cfgdir, ++x->nstarts);
	x->daemon_pid = spawn_daemon(x);
	if (x->daemon_pid < 0) {
		report(x, "fork: %s", g_strerror(errno));
		x->daemon_pid = 0;
		return false;
	}
	sig_daemon_pid = x->daemon_pid;
	g_strlcpy(sig_mnt, x->dir, sizeof(sig_mnt));
	write_pidfile(x, x->daemon_pid);
	while (!is_mounted(x->dir)) {
		if (waitpid(x->daemon_pid, &status, WNOHANG) == x->daemon_pid) {
			report(x, "slowmedia exited (status 0x%x) before mounting %s",
			       status, x->dir);
			x->daemon_pid = sig_daemon_pid = 0;
			print_daemon_log(x);
			return false;
		}
		if (now_ns() > deadline) {
			report(x, "slowmedia did not mount %s in %d ms", x->dir,
			       MOUNT_TIMEOUT_MS);
			kill(x->daemon_pid, SIGKILL);
			waitpid(x->daemon_pid, &status, 0);
			x->daemon_pid = sig_daemon_pid = 0;
			print_daemon_log(x);
			return false;
		}
		sleep_ms(POLL_MS);
	}
	if (stat(x->dir, &st) == 0)
		x->mnt_dev = st.st_dev;
	return true;
}

static bool unmount(struct fsx *x)
{
	for (int i = 0; i < UMOUNT_BUSY_RETRIES; i++) {
		if (umount2(x->dir, 0) == 0)
			return true;
		if (errno != EBUSY)
			break;
		sleep_ms(100);
	}
	report(x, "umount %s: %s", x->dir, g_strerror(errno));
	umount2(x->dir, MNT_DETACH);
	return false;
}

/* The value of key=SIZE in a -o option string, or 0. */
static uint64_t config_size(const char *config, const char *key)
{
	g_auto(GStrv) opts = g_strsplit(config, ",", -1);
	size_t klen = strlen(key);

	for (int i = 0; opts[i]; i++)
		if (!strncmp(opts[i], key, klen) && opts[i][klen] == '=')
			return parse_size_arg(opts[i] + klen + 1);
	return 0;
}

/* How long a drain may take: a full queue at rate=, twice, plus slack. */
static int64_t drain_limit_ns(const struct fsx *x)
{
	uint64_t queue = config_size(x->config, "queue"),
		 rate = config_size(x->config, "rate");

	if (!rate)
		return (int64_t)DRAIN_TIMEOUT_MS * 1000000;
	if (!queue)
		queue = DEFAULT_QUEUE_BYTES;
	return DRAIN_SLACK_MS * 1000000LL + (int64_t)(2 * queue * NSEC_PER_SEC / rate);
}

/*
 * The daemon ends its session (and drains) only when the kernel closes the
 * FUSE connection, which happens when the last mount of it goes; a copy in
 * another mount namespace (unshare -m) or under an rbind keeps it open. Say
 * which processes still see one.
 */
static void diagnose_conn(const struct fsx *x)
{
	g_autofree char *devstr =
	    g_strdup_printf(" %u:%u ", major(x->mnt_dev), minor(x->mnt_dev));
	g_autoptr(GDir) d = g_dir_open("/proc", 0, NULL);
	const char *pid;
	unsigned n = 0;

	while (d && (pid = g_dir_read_name(d))) {
		g_autofree char *mi = g_strdup_printf("/proc/%s/mountinfo", pid);
		g_autofree char *cpath = g_strdup_printf("/proc/%s/comm", pid);
		g_autofree char *text = NULL, *comm = NULL;

		if (!g_ascii_isdigit(*pid) ||
		    !g_file_get_contents(mi, &text, NULL, NULL) || !strstr(text, devstr))
			continue;
		g_file_get_contents(cpath, &comm, NULL, NULL);
		if (n++ < 10)
			printf("  pid %s (%s) still has the mount (device%s): it keeps "
			       "the FUSE "
			       "connection open\n",
			       pid, comm ? g_strstrip(comm) : "?", devstr);
	}
	if (!n)
		printf("  no process has the mount (device%s) any more: the daemon is "
		       "slow\n",
		       devstr);
}

static bool wait_daemon(struct fsx *x, int *status)
{
	int64_t start = now_ns(), slow = start + drain_limit_ns(x);
	int64_t deadline = start + (int64_t)DRAIN_TIMEOUT_MS * 1000000;
	bool ok = true;

	while (waitpid(x->daemon_pid, status, WNOHANG) != x->daemon_pid) {
		if (ok && now_ns() > slow) {
			report(x, "slowmedia still draining %.1f s after the unmount",
			       (double)(now_ns() - start) / NSEC_PER_SEC);
			diagnose_conn(x);
			dump_daemon_threads(x->daemon_pid);
			ok = false;
		}
		if (now_ns() > deadline) {
			report(x,
			       "slowmedia still running %d s after the unmount: killed",
			       DRAIN_TIMEOUT_MS / 1000);
			kill(x->daemon_pid, SIGKILL);
			waitpid(x->daemon_pid, status, 0);
			return false;
		}
		sleep_ms(POLL_MS);
	}
	printf("# the daemon exited %.2f s after the unmount\n",
	       (double)(now_ns() - start) / NSEC_PER_SEC);
	return ok;
}

/* Unmount; the daemon must drain, exit 0 and print no errors. */
bool daemon_stop(struct fsx *x)
{
	g_autofree char *text = NULL, *lower = NULL;
	bool ok = true;
	int status;

	if (!x->daemon_pid)
		return false;
	wd_disarm(x);
	if (is_mounted(x->dir))
		ok = unmount(x);
	ok = wait_daemon(x, &status) && ok;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		report(x, "slowmedia exited with status 0x%x", status);
		ok = false;
	}
	x->daemon_pid = sig_daemon_pid = 0;
	sig_mnt[0] = '\0';
	write_pidfile(x, 0);
	if (g_file_get_contents(x->daemon_log, &text, NULL, NULL) &&
	    strstr((lower = g_ascii_strdown(text, -1)), "error")) {
		report(x, "slowmedia printed errors");
		ok = false;
	}
	if (!ok)
		print_daemon_log(x);
	return ok;
}

bool daemon_kill(struct fsx *x)
{
	int status;

	if (!x->daemon_pid)
		return false;
	wd_disarm(x);
	kill(x->daemon_pid, SIGKILL);
	waitpid(x->daemon_pid, &status, 0);
	x->daemon_pid = sig_daemon_pid = 0;
	write_pidfile(x, 0);
	if (umount2(x->dir, MNT_DETACH) < 0) {
		report(x, "umount -l %s after the kill: %s", x->dir, g_strerror(errno));
		return false;
	}
	sig_mnt[0] = '\0';
	return true;
}

/*
 * Our mounts live in a mount namespace of our own: a namespace someone else
 * creates meanwhile (unshare -m) or an rbind of /var/tmp would otherwise copy
 * them, keep the FUSE connection open after our unmount, and the daemon would
 * not drain until that copy goes.
 */
void private_mount_ns(void)
{
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		printf("# no private mount namespace (%s): mounting in the caller's\n",
		       g_strerror(errno));
}
