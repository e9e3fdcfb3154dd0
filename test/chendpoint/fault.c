/*
 * fault.c - faults registered on the control port (POST /fault), and the
 * holds and delays in progress.
 *
 * Statement faults match the query text and are spent in the order they
 * were registered; idle_close matches only a request that arrived on a
 * kept-alive connection idle for at least its time.  Refused connections
 * are a counter.
 * A delay or a hold runs in the engine as a sleeping SELECT whose text
 * names the hold ('chendpoint-hold-N'), so that it shows in
 * system.processes and KILL QUERY stops it, as it would stop a slow
 * statement on a server; POST /release ends a hold by killing that SELECT
 * after marking the hold released, so the request can tell a release from
 * a client's KILL.
 * A stubborn hold is what a server's EXCHANGE or long INSERT does once it
 * runs: KILL QUERY marks it killed, yet it goes on until it is done (here:
 * until released, or until the endpoint stops, which lets it finish).
 * hold_reply holds the answer of a statement that has run: released, it is
 * sent; a shutdown drops it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chendpoint.h"

struct fault {
	char *pattern;
	long count;
	enum fault_mode mode;
	int code;
	long ms;
	enum midstream_form form;
	struct fault *next;
};

struct hold {
	unsigned long token;
	char *text;
	int released;
	int stubborn;
	long kills;		/* KILLs outlived (stubborn holds) */
	struct hold *next;
};

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fault *faults;		/* in order of registration */
static long refuse_count;

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hold *holds;
static unsigned long hold_seq;

static const char *const mode_names[] = {
	[FAULT_NONE] = "none",
	[FAULT_ERROR] = "error",
	[FAULT_LOST] = "lost",
	[FAULT_DELAY] = "delay",
	[FAULT_HOLD] = "hold",
	[FAULT_MIDSTREAM] = "midstream",
	[FAULT_REFUSE] = "refuse",
	[FAULT_IDLE_CLOSE] = "idle_close",
	[FAULT_STUBBORN] = "stubborn",
	[FAULT_HOLD_REPLY] = "hold_reply",
	[FAULT_HOLD_VANISH] = "hold_vanish",
};

void
fault_take(const char *text, size_t len, long idle_ms, struct fault_hit *hit)
{
	struct fault **pp, *f;

	memset(hit, 0, sizeof(*hit));
	pthread_mutex_lock(&fault_lock);
	for (pp = &faults; (f = *pp) != NULL; pp = &f->next) {
		if (!contains_nocase(text, len, f->pattern))
			continue;
		if (f->mode == FAULT_IDLE_CLOSE && (idle_ms < 0 || idle_ms < f->ms))
			continue;
		hit->mode = f->mode;
		hit->code = f->code;
		hit->ms = f->ms;
		hit->form = f->form;
		snprintf(hit->pattern, sizeof(hit->pattern), "%s", f->pattern);
		if (--f->count <= 0) {
			*pp = f->next;
			free(f->pattern);
			free(f);
		}
		break;
	}
	pthread_mutex_unlock(&fault_lock);
}

static enum fault_mode
mode_of(const char *name)
{
	size_t i;

	for (i = 1; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
		if (strcmp(name, mode_names[i]) == 0)
			return (enum fault_mode) i;
	return FAULT_NONE;
}

const char *
fault_add(const char *mode_s, const char *pattern, long count, long code,
	  long ms, const char *form)
{
	enum fault_mode mode = mode_of(mode_s);
	enum midstream_form fm = FORM_TAGGED;
	struct fault *f, **pp;

	if (mode == FAULT_NONE)
		return "unknown mode (error, lost, delay, hold, hold_vanish, "
		    "stubborn, hold_reply, midstream, refuse, idle_close)\n";
	if (count < 1)
		return "bad count\n";
	if ((mode == FAULT_ERROR || mode == FAULT_MIDSTREAM) &&
	    (code <= 0 || code > 100000))
		return "this mode needs code=<ClickHouse error code>\n";
	if ((mode == FAULT_DELAY || mode == FAULT_IDLE_CLOSE) &&
	    (ms < 0 || ms > HOLD_MAX_MS))
		return "this mode needs ms=<milliseconds>\n";
	if (form != NULL && strcmp(form, "marker") == 0)
		fm = FORM_MARKER;
	else if (form != NULL && strcmp(form, "tagged") != 0)
		return "form is tagged or marker\n";

	pthread_mutex_lock(&fault_lock);
	if (mode == FAULT_REFUSE) {
		refuse_count += count;
	} else {
		f = xmalloc(sizeof(*f));
		f->pattern = xstrdup(pattern ? pattern : "");
		f->count = count;
		f->mode = mode;
		f->code = (int) code;
		f->ms = ms;
		f->form = fm;
		f->next = NULL;
		for (pp = &faults; *pp != NULL; pp = &(*pp)->next)
			;
		*pp = f;
	}
	pthread_mutex_unlock(&fault_lock);
	return NULL;
}

void
faults_clear(void)
{
	pthread_mutex_lock(&fault_lock);
	while (faults != NULL) {
		struct fault *f = faults;

		faults = f->next;
		free(f->pattern);
		free(f);
	}
	refuse_count = 0;
	pthread_mutex_unlock(&fault_lock);
}

int
fault_take_refuse(void)
{
	int refuse = 0;

	pthread_mutex_lock(&fault_lock);
	if (refuse_count > 0) {
		refuse_count--;
		refuse = 1;
	}
	pthread_mutex_unlock(&fault_lock);
	return refuse;
}

void
faults_describe(struct buf *out)
{
	struct fault *f;

	pthread_mutex_lock(&fault_lock);
	for (f = faults; f != NULL; f = f->next) {
		buf_printf(out, "%s\t%ld\t", mode_names[f->mode], f->count);
		buf_put_escaped(out, f->pattern, strlen(f->pattern));
		buf_puts(out, "\n");
	}
	if (refuse_count > 0)
		buf_printf(out, "refuse\t%ld\t\n", refuse_count);
	pthread_mutex_unlock(&fault_lock);
}

/* ---- holds ---- */

struct hold *
hold_begin(const char *text, size_t len, int stubborn, unsigned long *token)
{
	struct hold *h = xmalloc(sizeof(*h));

	h->text = xstrndup(text, len);
	h->released = 0;
	h->stubborn = stubborn;
	h->kills = 0;
	pthread_mutex_lock(&hold_lock);
	h->token = ++hold_seq;
	h->next = holds;
	holds = h;
	pthread_mutex_unlock(&hold_lock);
	*token = h->token;
	return h;
}

int
hold_released(struct hold *h)
{
	int released;

	pthread_mutex_lock(&hold_lock);
	released = h->released;
	pthread_mutex_unlock(&hold_lock);
	return released;
}

void
hold_note_kill(struct hold *h)
{
	pthread_mutex_lock(&hold_lock);
	h->kills++;
	pthread_mutex_unlock(&hold_lock);
}

/* A KILL QUERY matched the sleep of hold 'token', and passed over it. */
void
holds_note_kill_token(unsigned long token)
{
	struct hold *h;

	pthread_mutex_lock(&hold_lock);
	for (h = holds; h != NULL; h = h->next)
		if (h->token == token)
			h->kills++;
	pthread_mutex_unlock(&hold_lock);
}

char *
hold_text_of(unsigned long token)
{
	struct hold *h;
	char *text = NULL;

	pthread_mutex_lock(&hold_lock);
	for (h = holds; h != NULL; h = h->next)
		if (h->token == token) {
			text = xstrdup(h->text);
			break;
		}
	pthread_mutex_unlock(&hold_lock);
	return text;
}

void
hold_wait(struct hold *h)
{
	while (!hold_released(h) && !atomic_load(&g.shutting_down))
		sleep_ms(20);
}

/* The holds in progress: number, KILLs outlived, released, text. */
void
holds_describe(struct buf *out)
{
	struct hold *h;

	pthread_mutex_lock(&hold_lock);
	for (h = holds; h != NULL; h = h->next) {
		buf_printf(out, "%lu\t%ld\t%d\t", h->token, h->kills,
		    h->released);
		buf_put_escaped(out, h->text, strlen(h->text));
		buf_puts(out, "\n");
	}
	pthread_mutex_unlock(&hold_lock);
}

void
hold_end(struct hold *h)
{
	struct hold **pp;

	pthread_mutex_lock(&hold_lock);
	for (pp = &holds; *pp != NULL; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	pthread_mutex_unlock(&hold_lock);
	free(h->text);
	free(h);
}

/* Stop the sleeping SELECT of hold 'token' (the KILL must not match itself). */
static void
kill_hold(struct engine_conn *ec, unsigned long token)
{
	char *err = NULL;
	int code = 0;
	char *sql = xasprintf("KILL QUERY WHERE query LIKE concat('%%chendpoint-', "
	    "'hold-%lu\\'%%') ASYNC", token);

	if (engine_exec(ec, sql, &err, &code) != 0)
		free(err);
	free(sql);
}

/* Is hold 'token' still waiting? */
static int
hold_exists(unsigned long token)
{
	struct hold *h;
	int found = 0;

	pthread_mutex_lock(&hold_lock);
	for (h = holds; h != NULL && !found; h = h->next)
		found = h->token == token;
	pthread_mutex_unlock(&hold_lock);
	return found;
}

/*
 * Mark the matching holds released, then stop their sleeping SELECTs.  A
 * hold whose SELECT has not reached the engine yet is missed by the KILL,
 * so it is repeated until every released hold has ended (at most 10 s).
 */
static int
release_matching(const char *pattern, int stubborn_only)
{
	unsigned long *tokens = NULL;
	size_t n = 0, i, left;
	struct hold *h;
	struct engine_conn *ec;
	uint64_t deadline = mono_ms() + 10000;

	pthread_mutex_lock(&hold_lock);
	for (h = holds; h != NULL; h = h->next) {
		if (h->released || (stubborn_only && !h->stubborn) ||
		    !contains_nocase(h->text, strlen(h->text),
		    pattern ? pattern : ""))
			continue;
		h->released = 1;
		tokens = xrealloc(tokens, (n + 1) * sizeof(*tokens));
		tokens[n++] = h->token;
	}
	pthread_mutex_unlock(&hold_lock);
	ec = n > 0 ? engine_connect() : NULL;
	for (left = ec != NULL ? n : 0; left > 0 && mono_ms() < deadline;) {
		left = 0;
		for (i = 0; i < n; i++)
			if (hold_exists(tokens[i])) {
				kill_hold(ec, tokens[i]);
				left++;
			}
		if (left > 0)
			sleep_ms(20);
	}
	if (ec != NULL)
		engine_close(ec);
	free(tokens);
	return (int) n;
}

int
holds_release(const char *pattern)
{
	return release_matching(pattern, 0);
}

void
holds_release_stubborn(void)
{
	(void) release_matching(NULL, 1);
}
