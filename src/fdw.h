/*-------------------------------------------------------------------------
 *
 * fdw.h
 *	  The dpwin_clickhouse foreign-data wrapper, which fdw.c owns: its
 *	  servers' options and user mappings, validated when they are set and
 *	  read as one connection's settings.  Its validator is an SQL-callable
 *	  function (dpwin_clickhouse_validator).
 *
 *	  Never talks to ClickHouse.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_FDW_H
#define DPWIN_FDW_H

/*
 * Connection settings of a dpwin_clickhouse foreign server, merged with the
 * calling user's user mapping.  The password is kept only here; nothing may
 * print it.
 */
typedef struct DpwinServerConf
{
	char	   *server_name;
	char	   *url;			/* http(s)://host:port, no trailing slash */
	char	   *ca_file;		/* NULL: system CAs */
	bool		verify_peer;
	int			connect_timeout_ms;
	int			request_timeout_ms;
	char	   *settings;		/* extra URL parameters "k=v&k2=v2", or NULL */
	char	   *user;			/* NULL: none */
	char	   *password;		/* NULL: none */
} DpwinServerConf;

/*
 * Server options + the user mapping of userid (else the PUBLIC one; with
 * neither, user and password are NULL).  ereports ERRCODE_UNDEFINED_OBJECT
 * if the server does not exist, ERRCODE_WRONG_OBJECT_TYPE if it is not a
 * dpwin_clickhouse server.  Does not check USAGE on the server.
 */
extern PGDLLEXPORT DpwinServerConf *dpwin_server_conf(const char *server_name, Oid userid);

/* Same checks as dpwin_server_conf() without reading options; the server's OID. */
extern Oid	dpwin_server_check(const char *server_name);

#endif							/* DPWIN_FDW_H */
