/*-------------------------------------------------------------------------
 *
 * fdw.c
 *	  The dpwin_clickhouse foreign-data wrapper: its option validator and
 *	  the loader that turns a foreign server plus a user mapping into a
 *	  DpwinServerConf.
 *
 *	  The wrapper has no handler: it only gives ClickHouse endpoints a home
 *	  in the catalog, so that the password lives in a user mapping (shown in
 *	  pg_user_mappings only to the mapped user, the server owner and
 *	  superusers) and never in dpwin's own tables.  Nothing here talks to
 *	  ClickHouse, and no message ever contains a password or a URL that
 *	  carries one.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include <ctype.h>
#include <limits.h>

#include "access/htup_details.h"
#include "access/reloptions.h"
#include "catalog/pg_foreign_data_wrapper.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "fdw.h"

#define DPWIN_FDW_NAME "dpwin_clickhouse"

#define DEFAULT_CONNECT_TIMEOUT_MS	10000
#define DEFAULT_REQUEST_TIMEOUT_MS	300000

static const char *const server_options[] = {
	"url", "ca_file", "verify_peer", "connect_timeout", "request_timeout",
	"settings", NULL
};
static const char *const mapping_options[] = {"user", "password", NULL};

/*
 * ClickHouse URL parameters that dpwin sets itself, or that would move a
 * credential or a query into the server definition.  session_id would make
 * parallel chunk requests share (and lock) one ClickHouse session.
 */
static const char *const reserved_settings[] = {
	"user", "password", "query", "database", "query_id", "session_id", NULL
};

static bool
name_in(const char *name, const char *const *list)
{
	for (int i = 0; list[i] != NULL; i++)
		if (strcmp(name, list[i]) == 0)
			return true;
	return false;
}

static char *
option_list_text(const char *const *list)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; list[i] != NULL; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", list[i]);
	return buf.data;
}

/*
 * Check a server url: http:// or https://, then host[:port] and at most a
 * trailing slash.  Returns the length of the part to keep (without the
 * trailing slash).  The value is only quoted in messages once it is known
 * not to contain userinfo.
 */
static size_t
check_url(const char *url)
{
	const char *p;
	const char *host;
	const char *end;
	size_t		hostlen;

	if (strncmp(url, "http://", 7) == 0)
		p = url + 7;
	else if (strncmp(url, "https://", 8) == 0)
		p = url + 8;
	else
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
				 errmsg("url must start with http:// or https://"),
				 errhint("Write the ClickHouse HTTP endpoint as http://host:8123 or https://host:8443.")));

	/* userinfo first, before anything quotes the value */
	end = p + strcspn(p, "/?#");
	if (memchr(p, '@', end - p) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
				 errmsg("url must not contain credentials"),
				 errhint("Put the user and password in a user mapping: CREATE USER MAPPING ... OPTIONS (user '...', password '...').")));

	if (*end == '?' || *end == '#' || (*end == '/' && end[1] != '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
				 errmsg("url \"%s\" must not have a path, query or fragment", url),
				 errhint("Give only the scheme, host and port; use the settings option for ClickHouse settings.")));

	host = p;
	if (*host == '[')
	{
		/* IPv6 literal */
		const char *close = memchr(host, ']', end - host);

		if (close == NULL || close == host + 1)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("url \"%s\" has a malformed IPv6 address", url)));
		for (const char *c = host + 1; c < close; c++)
			if (!(isxdigit((unsigned char) *c) || *c == ':' || *c == '.'))
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
						 errmsg("url \"%s\" has a malformed IPv6 address", url)));
		p = close + 1;
	}
	else
	{
		hostlen = strspn(host, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_");
		if (hostlen == 0 || host[0] == '.' || host[0] == '-')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("url \"%s\" has no valid host name", url)));
		p = host + hostlen;
	}

	if (*p == ':')
	{
		const char *digits = ++p;
		long		port = 0;

		while (p < end && isdigit((unsigned char) *p) && p - digits < 6)
			port = port * 10 + (*p++ - '0');
		if (p == digits || p != end || port < 1 || port > 65535)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("url \"%s\" has an invalid port", url),
					 errhint("A port is a number from 1 to 65535.")));
	}
	if (p != end)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
				 errmsg("url \"%s\" has an invalid character in its host name", url)));

	return end - url;
}

/* "k=v&k2=v2" with names [a-z_0-9]+ and unreserved or %XX-escaped values */
static void
check_settings(const char *settings)
{
	List	   *seen = NIL;
	const char *p = settings;

	if (*p == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
				 errmsg("settings must not be empty"),
				 errhint("Drop the option instead: ALTER SERVER ... OPTIONS (DROP settings).")));

	for (;;)
	{
		size_t		len = strcspn(p, "&");
		size_t		namelen = strspn(p, "abcdefghijklmnopqrstuvwxyz_0123456789");
		char	   *item = pnstrdup(p, len);
		char	   *name;
		const char *v;

		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("settings \"%s\" has an empty item", settings),
					 errhint("Write settings as 'name=value&name2=value2'.")));
		if (namelen == 0 || namelen > len || p[namelen] != '=')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("settings item \"%s\" is not name=value", item),
					 errdetail("Setting names are lower-case letters, digits and underscores."),
					 errhint("Write settings as 'name=value&name2=value2'.")));
		name = pnstrdup(p, namelen);
		if (name_in(name, reserved_settings))
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("setting \"%s\" may not be given in settings", name),
					 errhint("Credentials belong in a user mapping; dpwin sets %s itself.",
							 "query, database, query_id and session_id")));
		if (list_member(seen, makeString(name)))
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("setting \"%s\" appears more than once in settings", name)));
		seen = lappend(seen, makeString(name));

		v = p + namelen + 1;
		if (v == p + len)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("setting \"%s\" has an empty value", name)));
		while (v < p + len)
		{
			if (*v == '%')
			{
				if (v + 2 < p + len && isxdigit((unsigned char) v[1]) &&
					isxdigit((unsigned char) v[2]))
				{
					v += 3;
					continue;
				}
			}
			else if (*v != '\0' &&
					 strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~", *v) != NULL)
			{
				v++;
				continue;
			}
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_STRING_FORMAT),
					 errmsg("value of setting \"%s\" in \"%s\" is not URL-safe", name, item),
					 errhint("Use letters, digits, \"-._~\" and %%XX escapes.")));
		}

		if (p[len] == '\0')
			break;
		p += len + 1;
	}
}

static bool
parse_bool_option(DefElem *def)
{
	bool		result;

	if (!parse_bool(defGetString(def), &result))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("%s \"%s\" is not a boolean", def->defname, defGetString(def)),
				 errhint("Use true or false.")));
	return result;
}

static int
parse_ms_option(DefElem *def, int min)
{
	int			result;
	const char *hint = NULL;

	if (!parse_int(defGetString(def), &result, GUC_UNIT_MS, &hint) ||
		result < min)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("%s \"%s\" is not a duration of %d to %d milliseconds",
						def->defname, defGetString(def), min, INT_MAX),
				 hint ? errhint("%s", hint) :
				 errhint("Give milliseconds, or a number with a unit such as '30s'.")));
	return result;
}

/*
 * Check one server option and store it into conf (when not NULL).
 */
static void
apply_server_option(DefElem *def, DpwinServerConf *conf)
{
	const char *val = defGetString(def);

	if (strcmp(def->defname, "url") == 0)
	{
		size_t		keep = check_url(val);

		if (conf)
			conf->url = pnstrdup(val, keep);
	}
	else if (strcmp(def->defname, "ca_file") == 0)
	{
		if (val[0] != '/')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("ca_file \"%s\" is not an absolute path", val),
					 errhint("The file is read by the PostgreSQL server, so give its full path on the server.")));
		if (conf)
			conf->ca_file = pstrdup(val);
	}
	else if (strcmp(def->defname, "verify_peer") == 0)
	{
		bool		b = parse_bool_option(def);

		if (conf)
			conf->verify_peer = b;
	}
	else if (strcmp(def->defname, "connect_timeout") == 0)
	{
		int			ms = parse_ms_option(def, 1);

		if (conf)
			conf->connect_timeout_ms = ms;
	}
	else if (strcmp(def->defname, "request_timeout") == 0)
	{
		int			ms = parse_ms_option(def, 0);

		if (conf)
			conf->request_timeout_ms = ms;
	}
	else if (strcmp(def->defname, "settings") == 0)
	{
		check_settings(val);
		if (conf)
			conf->settings = pstrdup(val);
	}
	else
		elog(ERROR, "unexpected dpwin_clickhouse server option \"%s\"", def->defname);
}

/* Check one user mapping option; the password is never quoted. */
static void
apply_mapping_option(DefElem *def, DpwinServerConf *conf)
{
	const char *val = defGetString(def);

	if (strcmp(def->defname, "user") == 0)
	{
		if (val[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("user must not be empty"),
					 errhint("Omit the user option to connect as ClickHouse's default user.")));
		if (conf)
			conf->user = pstrdup(val);
	}
	else if (strcmp(def->defname, "password") == 0)
	{
		if (conf)
			conf->password = pstrdup(val);
	}
	else
		elog(ERROR, "unexpected dpwin_clickhouse user mapping option");
}

/*
 * dpwin.dpwin_clickhouse_validator(options text[], catalog oid)
 */
PG_FUNCTION_INFO_V1(dpwin_clickhouse_validator);

Datum
dpwin_clickhouse_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	const char *const *valid;
	const char *context;
	bool		have_url = false;
	ListCell   *lc;

	if (catalog == ForeignServerRelationId)
	{
		valid = server_options;
		context = "A dpwin_clickhouse server";
	}
	else if (catalog == UserMappingRelationId)
	{
		valid = mapping_options;
		context = "A dpwin_clickhouse user mapping";
	}
	else
	{
		static const char *const none[] = {NULL};

		valid = none;
		context = catalog == ForeignDataWrapperRelationId ?
			"The dpwin_clickhouse wrapper" : "A dpwin_clickhouse foreign table";
	}

	foreach(lc, options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (!name_in(def->defname, valid))
		{
			if (valid[0] == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
						 errmsg("invalid option \"%s\"", def->defname),
						 errhint("%s takes no options.", context)));
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("invalid option \"%s\"", def->defname),
					 errhint("%s takes these options: %s.", context,
							 option_list_text(valid))));
		}

		if (catalog == ForeignServerRelationId)
		{
			apply_server_option(def, NULL);
			if (strcmp(def->defname, "url") == 0)
				have_url = true;
		}
		else
			apply_mapping_option(def, NULL);
	}

	if (catalog == ForeignServerRelationId && !have_url)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("a dpwin_clickhouse server needs the url option"),
				 errhint("CREATE SERVER ... FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://host:8123').")));

	PG_RETURN_VOID();
}

/*
 * The options of userid's user mapping for serverid, or of the PUBLIC one,
 * or NIL when there is neither (connect without credentials).
 */
static List *
mapping_options_for(Oid userid, Oid serverid)
{
	HeapTuple	tp;
	Datum		datum;
	bool		isnull;
	List	   *result = NIL;

	tp = SearchSysCache2(USERMAPPINGUSERSERVER,
						 ObjectIdGetDatum(userid), ObjectIdGetDatum(serverid));
	if (!HeapTupleIsValid(tp))
		tp = SearchSysCache2(USERMAPPINGUSERSERVER,
							 ObjectIdGetDatum(InvalidOid),
							 ObjectIdGetDatum(serverid));
	if (!HeapTupleIsValid(tp))
		return NIL;

	datum = SysCacheGetAttr(USERMAPPINGUSERSERVER, tp,
							Anum_pg_user_mapping_umoptions, &isnull);
	if (!isnull)
		result = untransformRelOptions(datum);
	ReleaseSysCache(tp);
	return result;
}

/*
 * Check that a server exists and belongs to dpwin_clickhouse; returns it.
 */
static ForeignServer *
server_lookup(const char *server_name)
{
	ForeignServer *server;
	ForeignDataWrapper *fdw;

	server = GetForeignServerByName(server_name, true);
	if (server == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("server \"%s\" does not exist", server_name),
				 errhint("Create it with CREATE SERVER %s FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '...').",
						 quote_identifier(server_name))));

	fdw = GetForeignDataWrapper(server->fdwid);
	if (strcmp(fdw->fdwname, DPWIN_FDW_NAME) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("server \"%s\" does not use the dpwin_clickhouse foreign-data wrapper",
						server_name),
				 errdetail("It uses \"%s\".", fdw->fdwname)));
	return server;
}

Oid
dpwin_server_check(const char *server_name)
{
	return server_lookup(server_name)->serverid;
}

DpwinServerConf *
dpwin_server_conf(const char *server_name, Oid userid)
{
	ForeignServer *server = server_lookup(server_name);
	DpwinServerConf *conf = palloc0(sizeof(DpwinServerConf));
	ListCell   *lc;

	conf->server_name = pstrdup(server->servername);
	conf->verify_peer = true;
	conf->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
	conf->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;

	/* options were validated when stored; parse them the same way again */
	foreach(lc, server->options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (name_in(def->defname, server_options))
			apply_server_option(def, conf);
	}
	if (conf->url == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("server \"%s\" has no url option", server_name)));

	foreach(lc, mapping_options_for(userid, server->serverid))
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (name_in(def->defname, mapping_options))
			apply_mapping_option(def, conf);
	}

	return conf;
}

/*
 * The C function of dpwin.server_conf(), which the 0.1.0 catalog has and
 * the update to 0.2.0 drops.  It stays so that the 0.1.0 script still
 * installs with this library (CREATE FUNCTION looks its symbol up); in a
 * 0.1.0 database it fails, as every dpwin call there does until the
 * update.
 */
PG_FUNCTION_INFO_V1(dpwin_show_server_conf);

Datum
dpwin_show_server_conf(PG_FUNCTION_ARGS)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("dpwin.server_conf() was removed in dpwin 0.2.0"),
			 errhint("Run ALTER EXTENSION dpwin UPDATE.")));
	PG_RETURN_NULL();
}
