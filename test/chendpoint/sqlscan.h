/*
 * sqlscan.h - just enough ClickHouse SQL lexing for an HTTP front end.
 *
 * The endpoint never interprets SQL semantics (the engine does that); it
 * only needs to find a few landmarks in the query text:
 *   - where an INSERT's inline data begins (so the data can be streamed
 *     through a FIFO instead of being pasted into the query text),
 *   - which output FORMAT a query asks for (for Content-Type),
 *   - whether the text is empty or holds several statements (ClickHouse's
 *     HTTP interface refuses both),
 *   - the tokens that qidmap.c replaces to give a statement the client's
 *     query_id.
 * The lexer skips comments, string literals and quoted identifiers so that
 * keywords inside them are not mistaken for clauses.
 */
#ifndef CHENDPOINT_SQLSCAN_H
#define CHENDPOINT_SQLSCAN_H

#include <stddef.h>

/* Tokens of the query text (comments and blanks are skipped). */
enum sql_tok {
	SQL_T_END,		/* end of text */
	SQL_T_UNTERMINATED,	/* string, identifier or comment runs off the end */
	SQL_T_WORD,		/* keyword, identifier or number */
	SQL_T_QIDENT,		/* `quoted` or "quoted" identifier */
	SQL_T_STRING,		/* 'literal' */
	SQL_T_OPEN,		/* ( or [ */
	SQL_T_CLOSE,		/* ) or ] */
	SQL_T_SEMI,		/* ; */
	SQL_T_DOT,		/* . */
	SQL_T_OTHER		/* any other punctuation */
};

struct sql_scanner {
	const char *s;
	size_t n;
	size_t pos;
};

/* The next token; its bytes are s[*start, *end). */
enum sql_tok sql_next_token(struct sql_scanner *sc, size_t *start,
			    size_t *end);

enum insert_split_result {
	SPLIT_NONE = 0,		/* not an INSERT whose data follows the query */
	SPLIT_DATA = 1,		/* INSERT ... FORMAT f / VALUES: data follows */
	SPLIT_INCOMPLETE = 2	/* text ends before the answer is known */
};

/* State of ClickHouse's "data starts after the first newline" rule. */
enum data_skip {
	SKIP_DONE = 0,		/* data starts exactly at data_at */
	SKIP_BLANKS = 1,	/* still skipping ' ', '\t', '\f' */
	SKIP_AFTER_CR = 2	/* a '\r' was skipped; one '\n' may follow */
};

struct insert_split {
	size_t infile_at;	/* offset where "FROM INFILE '...'" belongs */
	size_t head_end;	/* the query head is text[0, head_end) */
	size_t data_at;		/* first data byte (<= text length) */
	enum data_skip skip;	/* rule state when data_at == text length */
	int values;		/* VALUES form (head_end is the VALUES keyword) */
	char format[128];	/* input format name ("Values" for VALUES) */
};

/*
 * Look at the beginning of text[0, n) for "INSERT INTO ... FORMAT name" or
 * "INSERT INTO ... VALUES".  'complete' says whether text holds the whole
 * query stream (otherwise an answer that depends on further bytes is
 * SPLIT_INCOMPLETE).
 */
enum insert_split_result sql_split_insert(const char *text, size_t n,
					  int complete,
					  struct insert_split *out);

/* Continue the data-start rule over more bytes; returns bytes to drop. */
size_t sql_skip_data_prefix(enum data_skip *state, const char *p, size_t n);

/* 1 if text holds only whitespace and comments. */
int sql_is_empty(const char *text, size_t n);

/* 1 if a second statement follows a top-level ';'. */
int sql_is_multi_statement(const char *text, size_t n);

/*
 * The output format named by the last top-level "FORMAT name" clause, or
 * 0 if there is none.  Copies the name into fmt (NUL-terminated).
 */
int sql_output_format(const char *text, size_t n, char *fmt, size_t fmtsz);

/*
 * The first keyword of the statement, upper-cased, into kw (empty if the
 * statement does not start with a word).
 */
void sql_first_keyword(const char *text, size_t n, char *kw, size_t kwsz);

#endif
