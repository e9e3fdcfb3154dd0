/*-------------------------------------------------------------------------
 *
 * ctq.h
 *	  Reading create_table_query as ClickHouse prints it (ctq.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CTQ_H
#define DPWIN_CTQ_H

/* [A-Za-z_][A-Za-z0-9_]*: what ClickHouse may print without backticks. */
extern bool dpwin_ctq_is_bare_word(const char *s);

/*
 * ident in backticks, escaped the way ClickHouse's formatter writes it
 * into create_table_query, palloc'd.
 */
extern char *dpwin_ctq_format_ident(const char *ident);

/* Does query contain word, exactly (case-sensitive), as a bare word? */
extern bool dpwin_ctq_has_bare_word(const char *query, const char *word);

/* Does the column list declare a PROJECTION? */
extern bool dpwin_ctq_has_projection_clause(const char *query);

/*
 * query from its column list on (without "CREATE TABLE db.name"),
 * palloc'd; NULL when the text does not have that shape.
 */
extern char *dpwin_ctq_body(const char *query);

#endif							/* DPWIN_CTQ_H */
