/*-------------------------------------------------------------------------
 *
 * ctq.c
 *	  Reading create_table_query (and view definitions) the way ClickHouse
 *	  prints them: how an identifier is spelled there, a lexer for bare
 *	  words outside strings and quoted identifiers, and the table body
 *	  without its name.  Admission (admission.c) uses them to find TTLs,
 *	  projections and materialized views writing into a target.
 *
 *	  ClickHouse formats create_table_query itself: keywords in upper case,
 *	  column names always in backticks in the column list, other
 *	  identifiers bare when they are plain words (docs/admission.md, "How
 *	  each rule is read").
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "ctq.h"

/* [A-Za-z_][A-Za-z0-9_]*: what ClickHouse may print without backticks. */
bool
dpwin_ctq_is_bare_word(const char *s)
{
	const char *p;

	if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') ||
		  s[0] == '_'))
		return false;
	for (p = s + 1; *p; p++)
	{
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			  (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	}
	return true;
}

/*
 * An identifier in backticks the way ClickHouse's formatter writes it into
 * create_table_query (backslash escapes for control characters, backslash
 * and backtick), so that we can find it in that text.
 */
char *
dpwin_ctq_format_ident(const char *ident)
{
	StringInfoData buf;
	const char *p;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '`');
	for (p = ident; *p; p++)
	{
		switch (*p)
		{
			case '\b':
				appendStringInfoString(&buf, "\\b");
				break;
			case '\f':
				appendStringInfoString(&buf, "\\f");
				break;
			case '\n':
				appendStringInfoString(&buf, "\\n");
				break;
			case '\r':
				appendStringInfoString(&buf, "\\r");
				break;
			case '\t':
				appendStringInfoString(&buf, "\\t");
				break;
			case '\\':
				appendStringInfoString(&buf, "\\\\");
				break;
			case '`':
				appendStringInfoString(&buf, "\\`");
				break;
			default:
				appendStringInfoChar(&buf, *p);
				break;
		}
	}
	appendStringInfoChar(&buf, '`');
	return buf.data;
}

/*
 * The lexer skips string literals and quoted identifiers and reports bare
 * words with their parenthesis depth, whether they start an element of a
 * parenthesized list, and which top-level parenthesized group they are in
 * (group 1 is the column list).
 */
typedef struct CtqLexer
{
	const char *p;
	int			depth;
	int			group;			/* number of depth-0 '(' seen so far */
	bool		elem_start;
} CtqLexer;

static void
ctq_skip_quoted(CtqLexer *lx)
{
	char		q = *lx->p++;

	while (*lx->p)
	{
		if (*lx->p == '\\' && lx->p[1] != '\0')
			lx->p += 2;
		else if (*lx->p == q && lx->p[1] == q)
			lx->p += 2;			/* doubled quote */
		else if (*lx->p == q)
		{
			lx->p++;
			return;
		}
		else
			lx->p++;
	}
}

static bool
ctq_is_word_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool
ctq_is_word_char(char c)
{
	return ctq_is_word_start(c) || (c >= '0' && c <= '9');
}

/* The next bare word, or false at the end of the text. */
static bool
ctq_next_word(CtqLexer *lx, const char **word, int *len, bool *elem_start)
{
	while (*lx->p)
	{
		char		c = *lx->p;

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
			lx->p++;
		else if (c == '\'' || c == '`' || c == '"')
		{
			ctq_skip_quoted(lx);
			lx->elem_start = false;
		}
		else if (c == '(')
		{
			if (lx->depth == 0)
				lx->group++;
			lx->depth++;
			lx->p++;
			lx->elem_start = true;
		}
		else if (c == ')')
		{
			if (lx->depth > 0)
				lx->depth--;
			lx->p++;
			lx->elem_start = false;
		}
		else if (c == ',')
		{
			lx->p++;
			lx->elem_start = true;
		}
		else if (ctq_is_word_start(c))
		{
			const char *start = lx->p;

			while (ctq_is_word_char(*lx->p))
				lx->p++;
			*word = start;
			*len = (int) (lx->p - start);
			*elem_start = lx->elem_start;
			lx->elem_start = false;
			return true;
		}
		else if (c >= '0' && c <= '9')
		{
			/* a number, including 1e10, 0x1F, 1.5 */
			while (ctq_is_word_char(*lx->p) || *lx->p == '.')
				lx->p++;
			lx->elem_start = false;
		}
		else
		{
			lx->p++;
			lx->elem_start = false;
		}
	}
	return false;
}

/* Does the text contain word, exactly (case-sensitive), as a bare word? */
bool
dpwin_ctq_has_bare_word(const char *query, const char *word)
{
	CtqLexer	lx = {query, 0, 0, false};
	const char *w;
	int			len;
	bool		es;
	int			wlen = strlen(word);

	while (ctq_next_word(&lx, &w, &len, &es))
	{
		if (len == wlen && memcmp(w, word, len) == 0)
			return true;
	}
	return false;
}

/*
 * Does the column list declare a projection?  In the column list every
 * column name is in backticks, so a bare PROJECTION that starts an element
 * at depth 1 of the first group is the keyword.  Used only on servers
 * without system.projections.
 */
bool
dpwin_ctq_has_projection_clause(const char *query)
{
	CtqLexer	lx = {query, 0, 0, false};
	const char *w;
	int			len;
	bool		es;

	while (ctq_next_word(&lx, &w, &len, &es))
	{
		if (lx.group == 1 && lx.depth == 1 && es &&
			len == 10 && memcmp(w, "PROJECTION", 10) == 0)
			return true;
	}
	return false;
}

/*
 * create_table_query without "CREATE TABLE db.name": everything from the
 * column list on, which is the same for a table and its CREATE TABLE AS
 * copies.  The column list is the first " (`" (a backtick inside a quoted
 * name is escaped, so the name cannot contain that sequence).  NULL when
 * the text does not have that shape.
 */
char *
dpwin_ctq_body(const char *query)
{
	const char *p = strstr(query, " (`");

	return p ? pstrdup(p) : NULL;
}
