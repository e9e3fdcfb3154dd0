/*
 * sqlscan.c - landmarks in ClickHouse query text; see sqlscan.h.
 */
#include "sqlscan.h"

#include <string.h>
#include <strings.h>


static int
is_word_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	    c == '\v';
}

/* Skip whitespace and comments; 0 if a comment is unterminated. */
static int
skip_blank(struct sql_scanner *sc)
{
	while (sc->pos < sc->n) {
		const char *s = sc->s;
		size_t p = sc->pos;

		if (is_space(s[p])) {
			sc->pos++;
		} else if (s[p] == '-' && p + 1 < sc->n && s[p + 1] == '-') {
			while (sc->pos < sc->n && s[sc->pos] != '\n')
				sc->pos++;
		} else if (s[p] == '#' && p + 1 < sc->n &&
		    (s[p + 1] == ' ' || s[p + 1] == '!')) {
			while (sc->pos < sc->n && s[sc->pos] != '\n')
				sc->pos++;
		} else if (s[p] == '/' && p + 1 < sc->n && s[p + 1] == '*') {
			/* ClickHouse block comments nest. */
			int depth = 0;

			while (sc->pos < sc->n) {
				if (s[sc->pos] == '/' && sc->pos + 1 < sc->n &&
				    s[sc->pos + 1] == '*') {
					depth++;
					sc->pos += 2;
				} else if (s[sc->pos] == '*' &&
				    sc->pos + 1 < sc->n && s[sc->pos + 1] == '/') {
					depth--;
					sc->pos += 2;
					if (depth == 0)
						break;
				} else {
					sc->pos++;
				}
			}
			if (depth != 0)
				return 0;
		} else {
			break;
		}
	}
	return 1;
}

/* Skip a quoted run that starts at sc->pos; 0 if unterminated. */
static int
skip_quoted(struct sql_scanner *sc, char q)
{
	sc->pos++;
	while (sc->pos < sc->n) {
		char c = sc->s[sc->pos];

		if (c == '\\') {
			sc->pos += 2;
			continue;
		}
		if (c == q) {
			/* A doubled quote is an escaped quote. */
			if (sc->pos + 1 < sc->n && sc->s[sc->pos + 1] == q) {
				sc->pos += 2;
				continue;
			}
			sc->pos++;
			return 1;
		}
		sc->pos++;
	}
	sc->pos = sc->n;
	return 0;
}

enum sql_tok
sql_next_token(struct sql_scanner *sc, size_t *start, size_t *end)
{
	char c;

	if (!skip_blank(sc)) {
		*start = *end = sc->n;
		return SQL_T_UNTERMINATED;
	}
	*start = sc->pos;
	if (sc->pos >= sc->n) {
		*end = sc->n;
		return SQL_T_END;
	}
	c = sc->s[sc->pos];
	if (is_word_byte((unsigned char) c)) {
		while (sc->pos < sc->n &&
		    is_word_byte((unsigned char) sc->s[sc->pos]))
			sc->pos++;
		*end = sc->pos;
		return SQL_T_WORD;
	}
	if (c == '\'' || c == '`' || c == '"') {
		int ok = skip_quoted(sc, c);

		*end = sc->pos;
		if (!ok)
			return SQL_T_UNTERMINATED;
		return c == '\'' ? SQL_T_STRING : SQL_T_QIDENT;
	}
	sc->pos++;
	*end = sc->pos;
	switch (c) {
	case '(':
	case '[':
		return SQL_T_OPEN;
	case ')':
	case ']':
		return SQL_T_CLOSE;
	case ';':
		return SQL_T_SEMI;
	case '.':
		return SQL_T_DOT;
	default:
		return SQL_T_OTHER;
	}
}

static int
word_is(const struct sql_scanner *sc, size_t start, size_t end, const char *kw)
{
	size_t len = strlen(kw);

	return end - start == len && strncasecmp(sc->s + start, kw, len) == 0;
}

/* After an opening bracket: skip to its partner.  Returns the last token. */
static enum sql_tok
skip_balanced(struct sql_scanner *sc)
{
	int depth = 1;
	size_t a, b;

	for (;;) {
		enum sql_tok t = sql_next_token(sc, &a, &b);

		if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
			return t;
		if (t == SQL_T_OPEN)
			depth++;
		else if (t == SQL_T_CLOSE && --depth == 0)
			return SQL_T_CLOSE;
	}
}

size_t
sql_skip_data_prefix(enum data_skip *state, const char *p, size_t n)
{
	size_t i = 0;

	while (*state != SKIP_DONE && i < n) {
		if (*state == SKIP_BLANKS) {
			if (p[i] == ' ' || p[i] == '\t' || p[i] == '\f') {
				i++;
			} else if (p[i] == '\r') {
				i++;
				*state = SKIP_AFTER_CR;
			} else if (p[i] == '\n') {
				i++;
				*state = SKIP_DONE;
			} else {
				*state = SKIP_DONE;
			}
		} else {
			if (p[i] == '\n')
				i++;
			*state = SKIP_DONE;
		}
	}
	return i;
}

enum insert_split_result
sql_split_insert(const char *text, size_t n, int complete,
		 struct insert_split *out)
{
	struct sql_scanner sc = {text, n, 0};
	size_t a, b;
	enum sql_tok t;
	int have_infile_at = 0;
	const enum insert_split_result at_end =
	    complete ? SPLIT_NONE : SPLIT_INCOMPLETE;

	memset(out, 0, sizeof(*out));

	t = sql_next_token(&sc, &a, &b);
	if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
		return at_end;
	/* A word cut by the end of a partial text may still become INSERT. */
	if (t != SQL_T_WORD || !word_is(&sc, a, b, "INSERT"))
		return (!complete && b == n) ? SPLIT_INCOMPLETE : SPLIT_NONE;
	t = sql_next_token(&sc, &a, &b);
	if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
		return at_end;
	if (t != SQL_T_WORD || !word_is(&sc, a, b, "INTO"))
		return SPLIT_NONE;

	/* The target: TABLE name, FUNCTION f(...), or a plain name. */
	t = sql_next_token(&sc, &a, &b);
	if (t == SQL_T_WORD && word_is(&sc, a, b, "TABLE"))
		t = sql_next_token(&sc, &a, &b);
	else if (t == SQL_T_WORD && word_is(&sc, a, b, "FUNCTION")) {
		t = sql_next_token(&sc, &a, &b);	/* function name */
		if (t != SQL_T_WORD)
			return t == SQL_T_END || t == SQL_T_UNTERMINATED ?
			    at_end : SPLIT_NONE;
		t = sql_next_token(&sc, &a, &b);
		if (t != SQL_T_OPEN)
			return t == SQL_T_END || t == SQL_T_UNTERMINATED ?
			    at_end : SPLIT_NONE;
		t = skip_balanced(&sc);
		if (t != SQL_T_CLOSE)
			return at_end;
		t = sql_next_token(&sc, &a, &b);
		goto clauses;
	}
	if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
		return at_end;
	if (t != SQL_T_WORD && t != SQL_T_QIDENT)
		return SPLIT_NONE;
	/* db.table: the name itself may be any word, even FORMAT. */
	for (;;) {
		t = sql_next_token(&sc, &a, &b);
		if (t != SQL_T_DOT)
			break;
		t = sql_next_token(&sc, &a, &b);
		if (t != SQL_T_WORD && t != SQL_T_QIDENT)
			return t == SQL_T_END || t == SQL_T_UNTERMINATED ?
			    at_end : SPLIT_NONE;
	}

clauses:
	for (;; t = sql_next_token(&sc, &a, &b)) {
		if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
			return at_end;
		if (t == SQL_T_OPEN) {
			if (skip_balanced(&sc) != SQL_T_CLOSE)
				return at_end;
			continue;
		}
		if (t != SQL_T_WORD)
			continue;
		if (word_is(&sc, a, b, "SETTINGS")) {
			if (!have_infile_at) {
				out->infile_at = a;
				have_infile_at = 1;
			}
		} else if (word_is(&sc, a, b, "VALUES")) {
			if (!have_infile_at)
				out->infile_at = a;
			out->head_end = a;
			out->data_at = b;
			out->skip = SKIP_DONE;
			out->values = 1;
			strcpy(out->format, "Values");
			return SPLIT_DATA;
		} else if (word_is(&sc, a, b, "FORMAT")) {
			size_t len;

			if (!have_infile_at)
				out->infile_at = a;
			t = sql_next_token(&sc, &a, &b);
			if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
				return at_end;
			if (t != SQL_T_WORD && t != SQL_T_QIDENT)
				return SPLIT_NONE;
			/* The name may continue in bytes not yet seen. */
			if (b == n && !complete)
				return SPLIT_INCOMPLETE;
			len = b - a;
			if (t == SQL_T_QIDENT) {
				a++;
				len -= 2;
			}
			if (len == 0 || len >= sizeof(out->format))
				return SPLIT_NONE;
			memcpy(out->format, text + a, len);
			out->format[len] = '\0';
			out->head_end = b;
			out->skip = SKIP_BLANKS;
			out->data_at = b + sql_skip_data_prefix(&out->skip,
			    text + b, n - b);
			return SPLIT_DATA;
		} else if (word_is(&sc, a, b, "SELECT") ||
		    word_is(&sc, a, b, "WITH") || word_is(&sc, a, b, "FROM")) {
			/* INSERT ... SELECT, or FROM INFILE: no inline data. */
			return SPLIT_NONE;
		}
	}
}

int
sql_is_empty(const char *text, size_t n)
{
	struct sql_scanner sc = {text, n, 0};
	size_t a, b;
	enum sql_tok t = sql_next_token(&sc, &a, &b);

	return t == SQL_T_END;
}

int
sql_is_multi_statement(const char *text, size_t n)
{
	struct sql_scanner sc = {text, n, 0};
	size_t a, b;
	int depth = 0, after_semi = 0;

	for (;;) {
		enum sql_tok t = sql_next_token(&sc, &a, &b);

		if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
			return 0;
		if (t == SQL_T_SEMI && depth == 0) {
			after_semi = 1;
			continue;
		}
		if (after_semi)
			return 1;
		if (t == SQL_T_OPEN)
			depth++;
		else if (t == SQL_T_CLOSE && depth > 0)
			depth--;
	}
}

int
sql_output_format(const char *text, size_t n, char *fmt, size_t fmtsz)
{
	struct sql_scanner sc = {text, n, 0};
	size_t a, b;
	int depth = 0, found = 0;

	for (;;) {
		enum sql_tok t = sql_next_token(&sc, &a, &b);

		if (t == SQL_T_END || t == SQL_T_UNTERMINATED)
			return found;
		if (t == SQL_T_OPEN)
			depth++;
		else if (t == SQL_T_CLOSE && depth > 0)
			depth--;
		else if (t == SQL_T_WORD && depth == 0 &&
		    word_is(&sc, a, b, "FORMAT")) {
			size_t len;

			t = sql_next_token(&sc, &a, &b);
			if (t != SQL_T_WORD && t != SQL_T_QIDENT)
				continue;
			len = b - a;
			if (t == SQL_T_QIDENT) {
				a++;
				len -= 2;
			}
			if (len == 0 || len >= fmtsz)
				continue;
			memcpy(fmt, text + a, len);
			fmt[len] = '\0';
			found = 1;
		}
	}
}

void
sql_first_keyword(const char *text, size_t n, char *kw, size_t kwsz)
{
	struct sql_scanner sc = {text, n, 0};
	size_t a, b, i;
	enum sql_tok t;

	kw[0] = '\0';
	t = sql_next_token(&sc, &a, &b);
	/* "(SELECT ...)" and the like: look inside the brackets. */
	while (t == SQL_T_OPEN)
		t = sql_next_token(&sc, &a, &b);
	if (t != SQL_T_WORD || kwsz == 0)
		return;
	for (i = 0; a + i < b && i + 1 < kwsz; i++) {
		char c = text[a + i];

		kw[i] = (c >= 'a' && c <= 'z') ? (char) (c - 'a' + 'A') : c;
	}
	kw[i] = '\0';
}
