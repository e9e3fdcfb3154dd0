/*
 * chendpoint - the ClickHouse HTTP interface over the embedded ClickHouse
 * engine (chDB).
 *
 * A test fixture (and the demo's embedded default): it speaks the HTTP
 * protocol of clickhouse-server closely enough that a client cannot tell
 * the difference for the features it uses, and it has a second, test-only
 * "control" port that can inject faults and shows which queries arrived.
 * See docs/endpoint.md.
 *
 * Threads: libmicrohttpd runs one thread per client connection.  Each
 * request runs in an engine session of its own: a new one, or one kept
 * from a statement with the same set-up that left it unchanged
 * (sessions.c), so URL settings, the default database and GET's readonly
 * mode never leak between requests.  An INSERT whose rows follow the query text is run in
 * a helper thread as "INSERT ... FROM INFILE '<fifo>'", and the connection
 * thread writes the request body into that FIFO as it arrives, so loads
 * stream with constant memory.  One "anchor" session stays open for the
 * life of the process so the embedded server is not restarted between
 * requests; all sessions are closed before exit.
 *
 * The parts: http.c (requests, accounts, answers), run.c (statements in
 * the engine), qidmap.c (query ids), fault.c (faults and holds), control.c
 * (the control port), sessions.c (kept engine sessions), qlog.c, status.c,
 * util.c, sqlscan.c, engine.c.
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "chendpoint.h"

struct endpoint_state g;

/* The server's shutdown_wait_unfinished default: 5 s. */
#define SHUTDOWN_WAIT_MS 5000


static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: chendpoint --lib PATH/libchdb.so --path DATADIR\n"
	    "                  --listen 127.0.0.1:PORT --control 127.0.0.1:PORT\n"
	    "                  --user USER --password PASSWORD [--log FILE]\n"
	    "                  [--config-file PATH/config.xml]\n"
	    "Serves the ClickHouse HTTP interface on the embedded engine.\n"
	    "Addresses must be loopback (127.0.0.0/8 or [::1]); port 0 picks "
	    "a free port.\n");
}

static int
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
		    (const struct sockaddr_in6 *) sa;

		return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
	}
	return 0;
}

/* Bind a listening socket on a loopback HOST:PORT; -1 and a message. */
static int
listen_on(const char *spec, char *bound, size_t boundsz, int *is_v6)
{
	char host[256];
	const char *port, *colon;
	struct addrinfo hints, *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, one = 1, rc;
	char addr[INET6_ADDRSTRLEN];

	if (spec[0] == '[') {
		const char *close_br = strchr(spec, ']');

		if (close_br == NULL || close_br[1] != ':')
			goto bad;
		snprintf(host, sizeof(host), "%.*s",
		    (int) (close_br - spec - 1), spec + 1);
		port = close_br + 2;
	} else {
		colon = strrchr(spec, ':');
		if (colon == NULL)
			goto bad;
		snprintf(host, sizeof(host), "%.*s", (int) (colon - spec),
		    spec);
		port = colon + 1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "chendpoint: %s: %s\n", spec, gai_strerror(rc));
		return -1;
	}
	if (!is_loopback(ai->ai_addr)) {
		fprintf(stderr, "chendpoint: %s: refusing to listen on a "
		    "non-loopback address\n", spec);
		freeaddrinfo(ai);
		return -1;
	}
	*is_v6 = ai->ai_family == AF_INET6;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "chendpoint: socket: %s\n", strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
	    listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *) &ss, &sl) != 0) {
		fprintf(stderr, "chendpoint: %s: %s\n", spec, strerror(errno));
		close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
		snprintf(bound, boundsz, "[%s]:%u", addr,
		    ntohs(in6->sin6_port));
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *) &ss;

		inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
		snprintf(bound, boundsz, "%s:%u", addr, ntohs(in->sin_port));
	}
	return fd;
bad:
	fprintf(stderr, "chendpoint: bad address '%s' (want HOST:PORT)\n",
	    spec);
	return -1;
}

/* libmicrohttpd's diagnostics, marked as ours on stderr. */
static void
mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void) cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	fprintf(stderr, "chendpoint: http: %s\n", line);
}

static struct MHD_Daemon *
start_daemon(int fd, int is_v6, MHD_AccessHandlerCallback handler,
	     int with_policy)
{
	unsigned int flags = MHD_USE_THREAD_PER_CONNECTION |
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
	    MHD_USE_ERROR_LOG;

	if (is_v6)
		flags |= MHD_USE_IPv6;
	return MHD_start_daemon(flags, 0,
	    with_policy ? accept_policy : NULL, NULL,
	    handler, NULL,
	    MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,	/* must be first */
	    MHD_OPTION_LISTEN_SOCKET, fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned int) 1000,
	    /* Idle connections close after keep_alive_timeout (30 s, as the server). */
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) 30,
	    MHD_OPTION_THREAD_STACK_SIZE, THREAD_STACK,
	    MHD_OPTION_NOTIFY_COMPLETED,
	    with_policy ? request_completed : NULL, NULL,
	    MHD_OPTION_NOTIFY_CONNECTION,
	    with_policy ? connection_notify : NULL, NULL,
	    MHD_OPTION_END);
}

/* One-value query on the anchor session, for the startup banner. */
static void
query_scalar(const char *q, char *out, size_t outsz)
{
	struct engine_result res;

	out[0] = '\0';
	if (engine_query(g.anchor, q, strlen(q), "TabSeparated", &res) == 0) {
		size_t n = res.len;

		while (n > 0 && (res.data[n - 1] == '\n'))
			n--;
		if (n >= outsz)
			n = outsz - 1;
		memcpy(out, res.data, n);
		out[n] = '\0';
	}
	engine_result_free(&res);
}

/* Remove leftover FIFOs and the directory itself. */
static void
remove_fifo_dir(void)
{
	DIR *d = opendir(g.fifo_dir);
	struct dirent *e;

	if (d != NULL) {
		while ((e = readdir(d)) != NULL)
			if (strncmp(e->d_name, "insert-", 7) == 0)
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	rmdir(g.fifo_dir);
}

struct options {
	const char *lib, *path, *listen_spec, *control_spec, *log_path,
	    *config_file;
};

/* 0 to go on, else the exit status (after --help, or a usage error). */
static int
parse_options(int argc, char **argv, struct options *o)
{
	static const struct option opts[] = {
		{"lib", required_argument, NULL, 'l'},
		{"path", required_argument, NULL, 'p'},
		{"listen", required_argument, NULL, 'L'},
		{"control", required_argument, NULL, 'C'},
		{"user", required_argument, NULL, 'u'},
		{"password", required_argument, NULL, 'P'},
		{"log", required_argument, NULL, 'o'},
		{"config-file", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int opt;

	memset(o, 0, sizeof(*o));
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			o->lib = optarg;
			break;
		case 'p':
			o->path = optarg;
			break;
		case 'L':
			o->listen_spec = optarg;
			break;
		case 'C':
			o->control_spec = optarg;
			break;
		case 'u':
			g.user = optarg;
			break;
		case 'P':
			g.password = optarg;
			break;
		case 'o':
			o->log_path = optarg;
			break;
		case 'c':
			o->config_file = optarg;
			break;
		case 'h':
			usage(stdout);
			return -1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !o->lib || !o->path || !o->listen_spec ||
	    !o->control_spec || !g.user || !g.password) {
		usage(stderr);
		return 2;
	}
	return 0;
}

/*
 * The engine boots without complaint when the configuration file is
 * missing, with its defaults; clickhouse-server refuses to start.  Do as
 * the server does, so that a typo does not quietly drop the configuration
 * (users, roles, row policies, ...).
 */
static int
check_config_file(const char *config_file)
{
	struct stat st;

	if (config_file == NULL)
		return 0;
	if (stat(config_file, &st) != 0 || access(config_file, R_OK) != 0) {
		fprintf(stderr, "chendpoint: config file %s: %s\n",
		    config_file, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "chendpoint: config file %s: not a regular "
		    "file\n", config_file);
		return -1;
	}
	return 0;
}

/*
 * The FIFO folder, the data directory and DATADIR/metadata: the engine
 * starts its background tasks (among them the one that finishes DROP ...
 * SYNC) only when it finds DATADIR/metadata at start; on a brand-new
 * directory DROP TABLE ... SYNC would hang forever.  Returns 0, or the exit
 * status.
 */
static int
prepare_dirs(const char *path)
{
	const char *tmp = getenv("TMPDIR");
	char *meta;

	snprintf(g.fifo_dir, sizeof(g.fifo_dir), "%s/chendpoint-XXXXXX",
	    tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(g.fifo_dir) == NULL) {
		fprintf(stderr, "chendpoint: mkdtemp %s: %s\n", g.fifo_dir,
		    strerror(errno));
		return 1;
	}
	if (mkdir(path, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "chendpoint: %s: %s\n", path, strerror(errno));
		rmdir(g.fifo_dir);
		return 1;
	}
	meta = xasprintf("%s/metadata", path);
	if (mkdir(meta, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "chendpoint: %s: %s\n", meta, strerror(errno));
		free(meta);
		rmdir(g.fifo_dir);
		return 1;
	}
	free(meta);
	return 0;
}

/* Load and open the engine; 0, or the exit status. */
static int
open_engine(const struct options *o)
{
	char err[512];

	if (engine_load(o->lib, err, sizeof(err)) != 0) {
		fprintf(stderr, "chendpoint: cannot load the engine: %s\n", err);
		return 1;
	}
	engine_set_path(o->path);
	g.data_path = o->path;
	qid_mode_load();
	if (o->config_file != NULL)
		engine_set_config_file(o->config_file);
	g.anchor = engine_connect();
	if (g.anchor == NULL) {
		fprintf(stderr, "chendpoint: cannot open the engine on %s%s%s\n",
		    o->path, o->config_file ? " with config file " : "",
		    o->config_file ? o->config_file : "");
		return 1;
	}
	load_error_names(g.anchor);
	load_roles(g.anchor);
	query_scalar("SELECT timezone()", g.timezone, sizeof(g.timezone));
	query_scalar("SELECT version()", g.engine_version,
	    sizeof(g.engine_version));
	return 0;
}

/*
 * Orderly shutdown: stop accepting, refuse new statements, cancel the
 * running ones, wait for connection threads, then close the engine
 * (exiting with open sessions crashes the engine).  As a server's
 * shutdown cancels every query (shutdown_wait_unfinished_queries is off
 * by default) but cannot stop one that ignores cancellation, and waits a
 * while (shutdown_wait_unfinished) for the connections to end, the
 * cancelled statements are answered with their error (394), the stubborn
 * ones run to their end and are answered, for at most SHUTDOWN_WAIT_MS.
 */
static void
shut_down(struct MHD_Daemon *main_d, struct MHD_Daemon *control_d)
{
	MHD_socket quiesced = MHD_quiesce_daemon(main_d);
	uint64_t until = mono_ms() + SHUTDOWN_WAIT_MS;

	if (quiesced != MHD_INVALID_SOCKET)
		close(quiesced);
	atomic_store(&g.shutting_down, 1);
	if (atomic_load(&g.executing) > 0) {
		char *kerr = NULL;
		int kcode = 0;

		if (engine_exec(g.anchor, "KILL QUERY WHERE query NOT ILIKE "
		    "'KILL QUERY%' AND position(query, concat('chendpoint-', "
		    "'stubborn')) = 0 ASYNC", &kerr, &kcode) != 0)
			free(kerr);
	}
	holds_release_stubborn();
	while ((atomic_load(&g.finishing) > 0 || atomic_load(&g.inflight) > 0) &&
	    mono_ms() < until)
		sleep_ms(20);
	MHD_stop_daemon(main_d);
	MHD_stop_daemon(control_d);
	sessions_close_all();
	engine_close(g.anchor);
	remove_fifo_dir();
	if (g.logfile != NULL)
		fclose(g.logfile);
}

int
main(int argc, char **argv)
{
	struct options o;
	char main_addr[128], control_addr[128];
	int rc, main_fd, control_fd, v6_main, v6_control, sig;
	struct MHD_Daemon *main_d, *control_d;
	sigset_t sigs;

	rc = parse_options(argc, argv, &o);
	if (rc != 0)
		return rc < 0 ? 0 : rc;

	/*
	 * Signals: SIGTERM/SIGINT are taken synchronously by main (sigwait)
	 * and blocked everywhere else; every thread, the engine's included,
	 * inherits this mask.  Broken pipes surface as EPIPE.
	 */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	main_fd = listen_on(o.listen_spec, main_addr, sizeof(main_addr),
	    &v6_main);
	if (main_fd < 0)
		return 2;
	control_fd = listen_on(o.control_spec, control_addr,
	    sizeof(control_addr), &v6_control);
	if (control_fd < 0 || check_config_file(o.config_file) != 0)
		return 2;
	if (o.log_path != NULL) {
		g.logfile = fopen(o.log_path, "a");
		if (g.logfile == NULL) {
			fprintf(stderr, "chendpoint: %s: %s\n", o.log_path,
			    strerror(errno));
			return 2;
		}
	}
	if (gethostname(g.hostname, sizeof(g.hostname) - 1) != 0)
		snprintf(g.hostname, sizeof(g.hostname), "chendpoint");
	if ((rc = prepare_dirs(o.path)) != 0)
		return rc;
	if ((rc = open_engine(&o)) != 0) {
		rmdir(g.fifo_dir);
		return rc;
	}

	main_d = start_daemon(main_fd, v6_main, main_handler, 1);
	control_d = main_d ?
	    start_daemon(control_fd, v6_control, control_handler, 0) : NULL;
	if (main_d == NULL || control_d == NULL) {
		fprintf(stderr, "chendpoint: cannot start the HTTP server\n");
		if (main_d != NULL)
			MHD_stop_daemon(main_d);
		engine_close(g.anchor);
		rmdir(g.fifo_dir);
		return 1;
	}

	printf("chendpoint ready: http://%s control http://%s engine %s "
	    "pid %ld\n", main_addr, control_addr, g.engine_version,
	    (long) getpid());
	fflush(stdout);

	while (sigwait(&sigs, &sig) != 0)
		;
	shut_down(main_d, control_d);
	printf("chendpoint stopped (signal %d)\n", sig);
	fflush(stdout);
	return 0;
}
