/*
 * qidmap.c - statements under the client's query_id, and the registry of
 * running statements.
 *
 * A server runs each statement under the query_id its client sends:
 * system.processes lists it under that id, KILL QUERY WHERE query_id = ...
 * stops it, and queryID() returns it.  The engine cannot be told an id: it
 * gives every statement a random one, and neither its library calls, its
 * connection arguments nor its settings take one (docs/endpoint.md,
 * "Query ids").  So in the visible mode the endpoint carries the client's
 * id in the statement's log_comment setting (unless the client sets
 * log_comment itself) and, in the statement text only:
 *   - FROM/JOIN system.processes reads a view of system.processes whose
 *     query_id and initial_query_id are the carried ids where there is one
 *     (and whose Settings do not show the carrier);
 *   - KILL QUERY WHERE <condition> evaluates <condition> over that view and
 *     kills the matching statements by their engine ids;
 *   - queryID(), query_id(), initialQueryID() and initial_query_id() are
 *     the client's id.
 * In the hidden mode nothing is carried or changed, as behind a proxy that
 * does not pass query ids on: statements run under the engine's ids only.
 * In both modes KILL QUERY passes over the stubborn statements (fault.c),
 * which a server cannot stop once they run.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chendpoint.h"

#define CARRIER_PREFIX "chendpoint:query_id="

/* The id a row of system.processes stands for, given its engine id column. */
#define CARRIED(col) \
	"if(startsWith(Settings['log_comment'], '" CARRIER_PREFIX "'), " \
	"substring(Settings['log_comment'], 21), " col ")"

static const char processes_view[] =
    "(SELECT * REPLACE (" CARRIED("query_id") " AS query_id, "
    CARRIED("initial_query_id") " AS initial_query_id, "
    "mapFilter((k, v) -> NOT (k = 'log_comment' AND startsWith(v, '"
    CARRIER_PREFIX "')), Settings) AS Settings) FROM system.processes)";

/*
 * What KILL QUERY may stop, in each mode: not a stubborn statement (its
 * text carries STUBBORN_MARK), which stands for a statement that a server
 * cannot stop once it runs.  The mark is split so that the KILL does not
 * hide itself.
 */
#define NOT_STUBBORN "position(query, concat('chendpoint-', 'stubborn')) = 0"
#define IS_STUBBORN "position(query, concat('chendpoint-', 'stubborn')) > 0"
#define ENGINE_ID "query_id AS __chendpoint_engine_query_id"

static const char kill_view_visible[] =
    "(SELECT * REPLACE (" CARRIED("query_id") " AS query_id, "
    CARRIED("initial_query_id") " AS initial_query_id) FROM "
    "(SELECT *, " ENGINE_ID " FROM system.processes WHERE "
    NOT_STUBBORN "))";
static const char kill_view_hidden[] =
    "(SELECT *, " ENGINE_ID " FROM system.processes WHERE " NOT_STUBBORN ")";
static const char stubborn_view_visible[] =
    "(SELECT * REPLACE (" CARRIED("query_id") " AS query_id, "
    CARRIED("initial_query_id") " AS initial_query_id) FROM "
    "system.processes WHERE " IS_STUBBORN ")";
static const char stubborn_view_hidden[] =
    "(SELECT * FROM system.processes WHERE " IS_STUBBORN ")";
/* Every statement a KILL's condition can match, stubborn or not. */
static const char match_view_visible[] =
    "(SELECT * REPLACE (" CARRIED("query_id") " AS query_id, "
    CARRIED("initial_query_id") " AS initial_query_id) FROM "
    "(SELECT *, " ENGINE_ID " FROM system.processes))";
static const char match_view_hidden[] =
    "(SELECT *, " ENGINE_ID " FROM system.processes)";

static atomic_int mode = QID_VISIBLE;
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static struct request *running;

enum qid_mode
qid_mode_get(void)
{
	return (enum qid_mode) atomic_load(&mode);
}

/*
 * The mode is a property of the server under test, like its tables: it
 * survives a restart of the endpoint (test/sandbox.sh restart-ch), so that
 * a client reconnecting after the restart meets the same server.
 */
static char *
mode_file(void)
{
	return xasprintf("%s/chendpoint_query_ids", g.data_path);
}

void
qid_mode_set(enum qid_mode m)
{
	char *path = mode_file();
	FILE *f = fopen(path, "w");

	atomic_store(&mode, (int) m);
	if (f != NULL) {
		fputs(m == QID_HIDDEN ? "hidden\n" : "visible\n", f);
		fclose(f);
	}
	free(path);
}

void
qid_mode_load(void)
{
	char *path = mode_file();
	FILE *f = fopen(path, "r");
	char line[32] = "";

	if (f != NULL) {
		if (fgets(line, sizeof(line), f) == NULL)
			line[0] = '\0';
		fclose(f);
	}
	atomic_store(&mode, (int) (strncmp(line, "hidden", 6) == 0 ?
	    QID_HIDDEN : QID_VISIBLE));
	free(path);
}

char *
qid_carrier(const char *query_id)
{
	return xasprintf(CARRIER_PREFIX "%s", query_id);
}

/* ---- the registry ---- */

int
running_add(struct request *r)
{
	struct request *e;

	pthread_mutex_lock(&run_lock);
	if (qid_mode_get() == QID_VISIBLE && !r->replace_running) {
		for (e = running; e != NULL; e = e->run_next)
			if (strcmp(e->query_id, r->query_id) == 0 &&
			    strcmp(e->user, r->user) == 0) {
				pthread_mutex_unlock(&run_lock);
				return -1;
			}
	}
	r->run_next = running;
	running = r;
	r->registered = 1;
	r->started_mono = mono_ms();
	pthread_mutex_unlock(&run_lock);
	return 0;
}

void
running_remove(struct request *r)
{
	struct request **pp;

	if (!r->registered)
		return;
	pthread_mutex_lock(&run_lock);
	for (pp = &running; *pp != NULL; pp = &(*pp)->run_next)
		if (*pp == r) {
			*pp = r->run_next;
			break;
		}
	r->registered = 0;
	pthread_mutex_unlock(&run_lock);
}

void
running_set_phase(struct request *r, enum run_phase p)
{
	atomic_store(&r->phase, (int) p);
}

void
running_describe(struct buf *out)
{
	static const char *const names[] = {
		"receiving", "delaying", "holding", "running", "answering"
	};
	struct request *e;
	uint64_t now = mono_ms();

	pthread_mutex_lock(&run_lock);
	for (e = running; e != NULL; e = e->run_next) {
		int p = atomic_load(&e->phase);

		buf_put_escaped(out, e->query_id, strlen(e->query_id));
		buf_puts(out, "\t");
		buf_put_escaped(out, e->user, strlen(e->user));
		buf_printf(out, "\t%s\t%llu\t", names[p],
		    (unsigned long long) (now - e->started_mono));
		if (e->log_text != NULL)
			buf_put_escaped(out, e->log_text, e->log_len);
		buf_puts(out, "\n");
	}
	pthread_mutex_unlock(&run_lock);
}

/* ---- rewriting the statement ---- */

struct token {
	enum sql_tok type;
	size_t a, b;
};

struct edit {
	size_t a, b;		/* text[a, b) is replaced */
	char *with;
};

struct rewrite {
	const char *s;
	struct token *t;
	size_t nt;
	struct edit *e;
	size_t ne;
};

static void
add_edit(struct rewrite *w, size_t a, size_t b, char *with)
{
	w->e = xrealloc(w->e, (w->ne + 1) * sizeof(*w->e));
	w->e[w->ne].a = a;
	w->e[w->ne].b = b;
	w->e[w->ne].with = with;
	w->ne++;
}

/* Token i is a word or quoted identifier spelling name (exactly). */
static int
tok_name(const struct rewrite *w, size_t i, const char *name)
{
	const struct token *t = &w->t[i];
	size_t len = strlen(name);

	if (i >= w->nt)
		return 0;
	if (t->type == SQL_T_WORD)
		return t->b - t->a == len && memcmp(w->s + t->a, name, len) == 0;
	if (t->type == SQL_T_QIDENT)
		return t->b - t->a == len + 2 &&
		    memcmp(w->s + t->a + 1, name, len) == 0;
	return 0;
}

/* Token i is the keyword kw (any case). */
static int
tok_kw(const struct rewrite *w, size_t i, const char *kw)
{
	const struct token *t = &w->t[i];
	size_t len = strlen(kw);

	return i < w->nt && t->type == SQL_T_WORD && t->b - t->a == len &&
	    strncasecmp(w->s + t->a, kw, len) == 0;
}

static int
tok_is(const struct rewrite *w, size_t i, enum sql_tok type)
{
	return i < w->nt && w->t[i].type == type;
}

/* Words that end a table expression rather than name its alias. */
static int
is_clause_word(const struct rewrite *w, size_t i)
{
	static const char *const words[] = {
		"WHERE", "PREWHERE", "FINAL", "SAMPLE", "GROUP", "ORDER",
		"LIMIT", "SETTINGS", "FORMAT", "UNION", "JOIN", "LEFT",
		"RIGHT", "INNER", "FULL", "CROSS", "ARRAY", "GLOBAL", "ANY",
		"ALL", "ASOF", "SEMI", "ANTI", "OUTER", "USING", "ON",
		"HAVING", "WINDOW", "QUALIFY", "INTO", "OFFSET", "EXCEPT",
		"INTERSECT", "PASTE", "WITH", NULL
	};
	int k;

	for (k = 0; words[k]; k++)
		if (tok_kw(w, i, words[k]))
			return 1;
	return 0;
}

/* FROM/JOIN system.processes at token i (the word system). */
static int
map_processes(struct rewrite *w, size_t i)
{
	int alias;

	if (i == 0 || !(tok_kw(w, i - 1, "FROM") || tok_kw(w, i - 1, "JOIN")) ||
	    !tok_name(w, i, "system") || !tok_is(w, i + 1, SQL_T_DOT) ||
	    !tok_name(w, i + 2, "processes"))
		return 0;
	/* Keep the name "processes" for columns qualified with it. */
	alias = tok_kw(w, i + 3, "AS") || tok_is(w, i + 3, SQL_T_QIDENT) ||
	    (tok_is(w, i + 3, SQL_T_WORD) && !is_clause_word(w, i + 3));
	add_edit(w, w->t[i].a, w->t[i + 2].b,
	    xasprintf("%s%s", processes_view, alias ? "" : " AS processes"));
	return 1;
}

/* queryID() and friends at token i: the client's id. */
static int
map_query_id_call(struct rewrite *w, size_t i, const char *query_id)
{
	static const char *const names[] = {
		"queryID", "query_id", "initialQueryID", "initial_query_id",
		NULL
	};
	struct buf lit = {0};
	int k;

	if (w->t[i].type != SQL_T_WORD || !tok_is(w, i + 1, SQL_T_OPEN) ||
	    w->s[w->t[i + 1].a] != '(' || !tok_is(w, i + 2, SQL_T_CLOSE) ||
	    (i > 0 && tok_is(w, i - 1, SQL_T_DOT)))
		return 0;
	for (k = 0; names[k]; k++)
		if (tok_kw(w, i, names[k]))
			break;
	if (names[k] == NULL)
		return 0;
	buf_put_literal(&lit, query_id, strlen(query_id));
	add_edit(w, w->t[i].a, w->t[i + 2].b, lit.data);
	return 1;
}

/*
 * KILL QUERY [ON CLUSTER c] WHERE <condition> [SYNC|ASYNC|TEST] [FORMAT f]
 * [SETTINGS ...]: the tokens [*where + 1, *end) are the condition; *kind
 * says SYNC, TEST or neither (ASYNC).
 */
static int
kill_where(const struct rewrite *w, size_t *where, size_t *end,
	   enum kill_kind *kind)
{
	size_t i;
	int depth = 0;

	*where = 0;
	*kind = KILL_ASYNC;
	if (!tok_kw(w, 0, "KILL") || !tok_kw(w, 1, "QUERY"))
		return 0;
	for (i = 2; i < w->nt && !*where; i++)
		if (tok_kw(w, i, "WHERE"))
			*where = i;
	if (!*where || *where + 1 >= w->nt)
		return 0;
	for (*end = *where + 1; *end < w->nt; (*end)++) {
		if (w->t[*end].type == SQL_T_OPEN)
			depth++;
		else if (w->t[*end].type == SQL_T_CLOSE && depth > 0)
			depth--;
		else if (depth == 0 && (w->t[*end].type == SQL_T_SEMI ||
		    tok_kw(w, *end, "SYNC") || tok_kw(w, *end, "ASYNC") ||
		    tok_kw(w, *end, "TEST") || tok_kw(w, *end, "FORMAT") ||
		    tok_kw(w, *end, "SETTINGS")))
			break;
	}
	if (*end < w->nt && tok_kw(w, *end, "SYNC"))
		*kind = KILL_SYNC;
	else if (*end < w->nt && tok_kw(w, *end, "TEST"))
		*kind = KILL_TEST;
	return *end > *where + 1;
}

/* The condition of a KILL QUERY is evaluated over the mode's kill view. */
static void
map_kill(struct rewrite *w)
{
	size_t where, end;
	enum kill_kind kind;

	if (!kill_where(w, &where, &end, &kind))
		return;
	add_edit(w, w->t[where].b, w->t[where].b,
	    xasprintf(" query_id IN (SELECT __chendpoint_engine_query_id "
	    "FROM %s WHERE ", qid_mode_get() == QID_VISIBLE ?
	    kill_view_visible : kill_view_hidden));
	add_edit(w, w->t[end - 1].b, w->t[end - 1].b, xstrdup(")"));
}

static int
edit_order(const void *x, const void *y)
{
	const struct edit *a = x, *b = y;

	if (a->a != b->a)
		return a->a < b->a ? -1 : 1;
	/* At one position, a replacement comes before an insertion. */
	return (int) (b->b - b->a > 0) - (int) (a->b - a->a > 0);
}

static void
tokenize(struct rewrite *w, const char *text, size_t len)
{
	struct sql_scanner sc = {text, len, 0};

	for (;;) {
		struct token t;

		t.type = sql_next_token(&sc, &t.a, &t.b);
		if (t.type == SQL_T_END || t.type == SQL_T_UNTERMINATED)
			break;
		w->t = xrealloc(w->t, (w->nt + 1) * sizeof(*w->t));
		w->t[w->nt++] = t;
	}
}

int
qid_kill_condition(const char *text, size_t len, size_t *cond_at,
		   size_t *cond_len, enum kill_kind *kind)
{
	struct rewrite w = {text, NULL, 0, NULL, 0};
	size_t where, end;
	int found;

	tokenize(&w, text, len);
	found = kill_where(&w, &where, &end, kind);
	if (found) {
		*cond_at = w.t[where + 1].a;
		*cond_len = w.t[end - 1].b - *cond_at;
	}
	free(w.t);
	return found;
}

char *
qid_stubborn_select(const char *what, const char *cond, size_t len)
{
	return xasprintf("SELECT %s FROM %s WHERE %.*s FORMAT TabSeparated", what,
	    qid_mode_get() == QID_VISIBLE ? stubborn_view_visible :
	    stubborn_view_hidden, (int) len, cond);
}

char *
qid_kill_match_select(const char *cond, size_t len)
{
	return xasprintf("SELECT query_id, user, query FROM %s WHERE "
	    "__chendpoint_engine_query_id != queryID() AND (%.*s) "
	    "FORMAT TabSeparated", qid_mode_get() == QID_VISIBLE ?
	    match_view_visible : match_view_hidden, (int) len, cond);
}

char *
qid_rewrite(const char *text, size_t len, const char *query_id,
	    size_t *out_len)
{
	struct rewrite w = {text, NULL, 0, NULL, 0};
	struct buf out = {0};
	size_t i, at = 0;

	tokenize(&w, text, len);
	map_kill(&w);
	for (i = 0; i < w.nt && qid_mode_get() == QID_VISIBLE; i++)
		if (!map_processes(&w, i))
			map_query_id_call(&w, i, query_id);
	free(w.t);
	if (w.ne == 0)
		return NULL;
	qsort(w.e, w.ne, sizeof(*w.e), edit_order);
	for (i = 0; i < w.ne; i++) {
		buf_append(&out, text + at, w.e[i].a - at);
		buf_puts(&out, w.e[i].with);
		at = w.e[i].b;
		free(w.e[i].with);
	}
	buf_append(&out, text + at, len - at);
	free(w.e);
	*out_len = out.len;
	return out.data;
}
