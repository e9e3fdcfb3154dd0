/*
 * test/bench/netdelay.c — the benchmark's network (docs/benchmark.md,
 * "Two hosts and round trips").
 *
 *   netdelay proxy TARGET_PORT RTT_MS PORTFILE
 *	listens on a free loopback port (written to PORTFILE once it listens)
 *	and forwards every connection to 127.0.0.1:TARGET_PORT, holding the
 *	bytes of each direction for half the round trip before passing them
 *	on, as a link with that latency and no bandwidth limit would.  A new
 *	connection's first bytes also wait for one round trip, the TCP
 *	handshake a client makes before it can send.  This machine's kernel
 *	has no netem; this is the user-space stand-in.
 *
 *   netdelay stamp FILE
 *	follows FILE (the endpoint's query log) from its current end and
 *	prints every line appended to it prefixed with the unix time in ms
 *	at which it appeared: the log says when a statement arrived; this
 *	says when it was answered.
 *
 * Test tooling only; built by test/bench/run.sh.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536
#define MAX_QUEUED (32L * 1024 * 1024)

typedef struct node
{
	struct node *next;
	int64_t		due;			/* CLOCK_MONOTONIC ns */
	size_t		len;			/* 0: end of stream */
	char		data[];
} node;

typedef struct conn conn;

typedef struct pipe_dir
{
	conn	   *c;
	int			from;
	int			to;
	int64_t		floor_ns;		/* no byte leaves before this */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	node	   *head;
	node	   *tail;
	long		queued;
} pipe_dir;

struct conn
{
	int			client;
	int			server;
	pthread_mutex_t mu;
	int			refs;
	pipe_dir	dir[2];
};

static int64_t half_ns;

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
conn_release(conn *c)
{
	int			last;

	pthread_mutex_lock(&c->mu);
	last = --c->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (!last)
		return;
	close(c->client);
	close(c->server);
	for (int i = 0; i < 2; i++)
	{
		while (c->dir[i].head)
		{
			node	   *n = c->dir[i].head;

			c->dir[i].head = n->next;
			free(n);
		}
	}
	free(c);
}

static void
push(pipe_dir *d, node *n)
{
	pthread_mutex_lock(&d->mu);
	while (d->queued > MAX_QUEUED)
		pthread_cond_wait(&d->cv, &d->mu);
	n->next = NULL;
	if (d->tail)
		d->tail->next = n;
	else
		d->head = n;
	d->tail = n;
	d->queued += n->len;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void *
reader(void *arg)
{
	pipe_dir   *d = arg;

	for (;;)
	{
		node	   *n = malloc(sizeof(node) + CHUNK);
		ssize_t		r;
		int64_t		t;

		if (!n)
			abort();
		r = read(d->from, n->data, CHUNK);
		if (r < 0 && errno == EINTR)
		{
			free(n);
			continue;
		}
		t = now_ns();
		if (t < d->floor_ns)
			t = d->floor_ns;
		n->due = t + half_ns;
		n->len = r > 0 ? (size_t) r : 0;
		push(d, n);
		if (r <= 0)
			break;
	}
	conn_release(d->c);
	return NULL;
}

static void *
writer(void *arg)
{
	pipe_dir   *d = arg;
	int			failed = 0;

	for (;;)
	{
		node	   *n;
		int64_t		wait;

		pthread_mutex_lock(&d->mu);
		while (!d->head)
			pthread_cond_wait(&d->cv, &d->mu);
		n = d->head;
		pthread_mutex_unlock(&d->mu);
		wait = n->due - now_ns();
		if (wait > 0)
		{
			struct timespec ts = {wait / 1000000000, wait % 1000000000};

			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		pthread_mutex_lock(&d->mu);
		d->head = n->next;
		if (!d->head)
			d->tail = NULL;
		d->queued -= n->len;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
		if (n->len == 0)
		{
			free(n);
			shutdown(d->to, SHUT_WR);
			break;
		}
		for (size_t off = 0; !failed && off < n->len;)
		{
			ssize_t		w = write(d->to, n->data + off, n->len - off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				failed = 1;
			else
				off += w;
		}
		free(n);
		if (failed)
		{
			/* the peer is gone: end both directions, as a reset would */
			shutdown(d->to, SHUT_RDWR);
			shutdown(d->from, SHUT_RDWR);
			/* keep draining until the reader's end of stream */
			for (;;)
			{
				pthread_mutex_lock(&d->mu);
				while (!d->head)
					pthread_cond_wait(&d->cv, &d->mu);
				n = d->head;
				d->head = n->next;
				if (!d->head)
					d->tail = NULL;
				d->queued -= n->len;
				pthread_cond_broadcast(&d->cv);
				pthread_mutex_unlock(&d->mu);
				if (n->len == 0)
				{
					free(n);
					break;
				}
				free(n);
			}
			break;
		}
	}
	conn_release(d->c);
	return NULL;
}

static void
start_thread(void *(*fn) (void *), void *arg)
{
	pthread_t	t;
	pthread_attr_t a;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 256 * 1024);
	if (pthread_create(&t, &a, fn, arg) != 0)
		abort();
	pthread_attr_destroy(&a);
}

static int
proxy(int target_port, int rtt_ms, const char *portfile)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t	alen = sizeof(a);
	int			one = 1;
	int			ls = socket(AF_INET, SOCK_STREAM, 0);
	FILE	   *pf;

	half_ns = (int64_t) rtt_ms * 500000;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(ls, 128) < 0 ||
		getsockname(ls, (struct sockaddr *) &a, &alen) < 0)
	{
		perror("netdelay: listen");
		return 1;
	}
	pf = fopen(portfile, "w");
	if (!pf)
	{
		perror(portfile);
		return 1;
	}
	fprintf(pf, "%d\n", ntohs(a.sin_port));
	fclose(pf);
	for (;;)
	{
		int			cs = accept(ls, NULL, NULL);
		int			ss;
		struct sockaddr_in t = {.sin_family = AF_INET};
		conn	   *c;
		int64_t		t0 = now_ns();

		if (cs < 0)
			continue;
		ss = socket(AF_INET, SOCK_STREAM, 0);
		t.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		t.sin_port = htons(target_port);
		if (connect(ss, (struct sockaddr *) &t, sizeof(t)) < 0)
		{
			close(cs);
			close(ss);
			continue;
		}
		setsockopt(cs, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(ss, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(conn));
		c->client = cs;
		c->server = ss;
		c->refs = 4;
		pthread_mutex_init(&c->mu, NULL);
		for (int i = 0; i < 2; i++)
		{
			pipe_dir   *d = &c->dir[i];

			d->c = c;
			d->from = i == 0 ? cs : ss;
			d->to = i == 0 ? ss : cs;
			/* the handshake: the client sends once its SYN came back */
			d->floor_ns = i == 0 ? t0 + 2 * half_ns : 0;
			pthread_mutex_init(&d->mu, NULL);
			pthread_cond_init(&d->cv, NULL);
		}
		for (int i = 0; i < 2; i++)
		{
			start_thread(reader, &c->dir[i]);
			start_thread(writer, &c->dir[i]);
		}
	}
}

static int
stamp(const char *path)
{
	int			in = inotify_init();
	FILE	   *f = fopen(path, "r");

	/*
	 * A line longer than this would be read as partial forever: a clone of
	 * a thousand partitions is one statement of about 100 kB.
	 */
	static char line[1 << 22];
	char		ev[4096];

	if (in < 0 || !f || inotify_add_watch(in, path, IN_MODIFY) < 0)
	{
		perror(path);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (;;)
	{
		while (fgets(line, sizeof(line), f))
		{
			struct timespec ts;
			size_t		n = strlen(line);

			if (n == 0 || line[n - 1] != '\n')
			{
				/* a partial line: read it again once it is whole */
				fseek(f, -(long) n, SEEK_CUR);
				break;
			}
			clock_gettime(CLOCK_REALTIME, &ts);
			printf("%.3f\t%s", ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6, line);
		}
		clearerr(f);
		if (read(in, ev, sizeof(ev)) < 0 && errno != EINTR)
			return 1;
	}
}

int
main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && strcmp(argv[1], "proxy") == 0)
		return proxy(atoi(argv[2]), atoi(argv[3]), argv[4]);
	if (argc == 3 && strcmp(argv[1], "stamp") == 0)
		return stamp(argv[2]);
	fprintf(stderr, "usage: netdelay proxy TARGET_PORT RTT_MS PORTFILE | netdelay stamp FILE\n");
	return 2;
}
