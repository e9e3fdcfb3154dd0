/*-------------------------------------------------------------------------
 *
 * dpwin_test.c
 *	  SQL access to dpwin's internals for the test suite only: the RowBinary
 *	  encoder and type parity, the digest, target admission, the ClickHouse
 *	  client and the target lease.  This module is built and installed by
 *	  the test sandbox (test/sandbox.sh), never by the product; its
 *	  functions live in schema dpwin_test and only superusers may call
 *	  them.
 *
 *	  It calls dpwin's own functions, which the server resolves in the
 *	  dpwin library that shared_preload_libraries loaded first.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "chclient.h"
#include "chtype.h"
#include "digest.h"
#include "exchange_probe.h"
#include "fdw.h"
#include "lease.h"
#include "route.h"
#include "rowbinary.h"
#include "admission.h"
#include "target.h"

PG_MODULE_MAGIC;


/* ----------------------------------------------------------------
 *		RowBinary encoder and type parity
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dpwin__encode_rowbinary);
PG_FUNCTION_INFO_V1(dpwin__rb_type_parity);

/*
 * dpwin_test.encode_rowbinary(value anyelement, ch_type text,
 *                         window_value timestamptz DEFAULT NULL) -> bytea
 *
 * Encodes one value as a one-column row of a column that may hold NULLs:
 * a NULL for a type that is not Nullable fails as it does in a refresh.
 * The argument's typmod is taken from the call expression, so table
 * columns keep theirs.  With window_value, a
 * second (window) column is encoded after it and stripped again, so that
 * fidelity errors show their row detail.
 */
Datum
dpwin__encode_rowbinary(PG_FUNCTION_ARGS)
{
	Oid			typid = get_fn_expr_argtype(fcinfo->flinfo, 0);
	int32		typmod = -1;
	char	   *ch_type;
	bool		with_window;
	char	   *names[2] = {"value", "window"};
	Oid			typids[2];
	int32		typmods[2] = {-1, -1};
	bool		notnull[2] = {false, true};
	char	   *ch_types[2];
	Datum		values[2];
	bool		isnull[2];
	RbEncoder  *enc;
	StringInfoData buf;
	bytea	   *result;
	int			len;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ClickHouse type must not be NULL")));
	if (!OidIsValid(typid))
		ereport(ERROR,
				(errcode(ERRCODE_INDETERMINATE_DATATYPE),
				 errmsg("could not determine the type of the value")));
	if (fcinfo->flinfo->fn_expr && IsA(fcinfo->flinfo->fn_expr, FuncExpr))
	{
		List	   *args = ((FuncExpr *) fcinfo->flinfo->fn_expr)->args;

		if (list_length(args) >= 1)
			typmod = exprTypmod((Node *) linitial(args));
	}
	/* an unparsable type is reported by dpwin_rb_encoder_create() */
	ch_type = text_to_cstring(PG_GETARG_TEXT_PP(1));

	with_window = PG_NARGS() >= 3 && !PG_ARGISNULL(2);
	typids[0] = typid;
	typmods[0] = typmod;
	ch_types[0] = ch_type;
	values[0] = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	isnull[0] = PG_ARGISNULL(0);
	typids[1] = TIMESTAMPTZOID;
	ch_types[1] = "DateTime64(6, 'UTC')";
	values[1] = with_window ? PG_GETARG_DATUM(2) : (Datum) 0;
	isnull[1] = false;

	enc = dpwin_rb_encoder_create(with_window ? 2 : 1, names, typids, typmods,
							notnull, ch_types, with_window ? 1 : -1);
	initStringInfo(&buf);
	dpwin_rb_encode_row(enc, values, isnull, &buf);
	len = buf.len - (with_window ? 8 : 0);

	result = (bytea *) palloc(VARHDRSZ + len);
	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), buf.data, len);
	PG_RETURN_BYTEA_P(result);
}

/* dpwin_test.rb_type_parity(typ regtype, typmod int, ch_type text) -> text */
Datum
dpwin__rb_type_parity(PG_FUNCTION_ARGS)
{
	char	   *why;

	why = dpwin_ch_type_parity(PG_GETARG_OID(0), PG_GETARG_INT32(1),
							   text_to_cstring(PG_GETARG_TEXT_PP(2)));
	if (why == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(why));
}

/* ----------------------------------------------------------------
 *		digest
 * ----------------------------------------------------------------
 */

/*
 * SipHash-2-4 of data under the key (k0, k1), as the product's row digest
 * computes it: one row added to an empty digest, whose two sums are the
 * two lanes (SIP64_PAIR) or the two halves (SIP128) of the hash.  The
 * reference vectors thus exercise the code that dpwin's digests run.
 */
static DpwinDigest
siphash_of_row(DpwinDigestScheme scheme, uint64 k0, uint64 k1, bytea *data)
{
	DpwinDigestKey key;
	DpwinDigest d = DPWIN_DIGEST_INIT;

	key.scheme = scheme;
	key.k1[0] = key.k2[0] = k0;
	key.k1[1] = key.k2[1] = k1;
	dpwin_digest_add_row(&d, &key, VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data));
	return d;
}

PG_FUNCTION_INFO_V1(dpwin__siphash24);

/*
 * dpwin_test.siphash24(k0 bigint, k1 bigint, data bytea) -> bigint: the uint64
 * result as its two's complement, like the keys.  One key in both lanes of
 * the SIP64_PAIR scheme: the lanes must agree.
 */
Datum
dpwin__siphash24(PG_FUNCTION_ARGS)
{
	DpwinDigest d = siphash_of_row(DPWIN_DIGEST_SIP64_PAIR,
								   (uint64) PG_GETARG_INT64(0),
								   (uint64) PG_GETARG_INT64(1),
								   PG_GETARG_BYTEA_PP(2));

	if (d.sum1 != d.sum2)
		elog(ERROR, "dpwin_test: the two SipHash lanes disagree");
	PG_RETURN_INT64((int64) d.sum1);
}

PG_FUNCTION_INFO_V1(dpwin__siphash24_128);

/*
 * dpwin_test.siphash24_128(k0 bigint, k1 bigint, data bytea) -> bytea: the
 * 16 bytes of the reference output, as ClickHouse's FixedString holds them
 * (the first eight bytes are the first sum read little-endian).
 */
Datum
dpwin__siphash24_128(PG_FUNCTION_ARGS)
{
	DpwinDigest d = siphash_of_row(DPWIN_DIGEST_SIP128,
								   (uint64) PG_GETARG_INT64(0),
								   (uint64) PG_GETARG_INT64(1),
								   PG_GETARG_BYTEA_PP(2));
	uint64		h[2] = {d.sum1, d.sum2};
	bytea	   *out = palloc(VARHDRSZ + 16);

	SET_VARSIZE(out, VARHDRSZ + 16);
	for (int i = 0; i < 16; i++)
		((unsigned char *) VARDATA(out))[i] = (unsigned char) (h[i / 8] >> (8 * (i % 8)));
	PG_RETURN_BYTEA_P(out);
}

PG_FUNCTION_INFO_V1(dpwin__digest_rows);
PG_FUNCTION_INFO_V1(dpwin__digest_ch_select_list);

static void
digest_key_arg(text *t, DpwinDigestKey *key)
{
	char	   *s = text_to_cstring(t);

	if (!dpwin_digest_key_from_text(s, key))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid digest key \"%s\"", s),
				 errhint("A digest key is \"sip128:\" and two unsigned 64-bit decimal numbers separated by a colon, or four such numbers.")));
}

/*
 * dpwin_test.digest_rows(key text, rows bytea[]) -> text: the digest of the
 * given RowBinary rows (NULL elements skipped) as "count:sum1:sum2".
 */
Datum
dpwin__digest_rows(PG_FUNCTION_ARGS)
{
	DpwinDigestKey key;
	DpwinDigest d = DPWIN_DIGEST_INIT;
	DpwinDigest back;
	ArrayType  *rows = PG_GETARG_ARRAYTYPE_P(1);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	   *result;

	digest_key_arg(PG_GETARG_TEXT_PP(0), &key);
	deconstruct_array(rows, BYTEAOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		bytea	   *row;

		if (nulls[i])
			continue;
		row = DatumGetByteaPP(elems[i]);
		dpwin_digest_add_row(&d, &key, VARDATA_ANY(row), VARSIZE_ANY_EXHDR(row));
	}
	result = dpwin_digest_to_text(&d);
	/* the text form must read back to the same digest */
	if (!dpwin_digest_from_text(result, &back) || !dpwin_digest_equal(&d, &back))
		elog(ERROR, "digest text form \"%s\" does not read back", result);
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/* dpwin_test.digest_ch_select_list(key text, quoted_columns text) -> text */
Datum
dpwin__digest_ch_select_list(PG_FUNCTION_ARGS)
{
	DpwinDigestKey key;

	digest_key_arg(PG_GETARG_TEXT_PP(0), &key);
	PG_RETURN_TEXT_P(cstring_to_text(
									 dpwin_digest_ch_select_list(&key,
																 text_to_cstring(PG_GETARG_TEXT_PP(1)))));
}

/* ----------------------------------------------------------------
 *		ClickHouse client
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dpwin__ch_query);

Datum
dpwin__ch_query(PG_FUNCTION_ARGS)
{
	Name		server = PG_GETARG_NAME(0);
	char	   *sql = text_to_cstring(PG_GETARG_TEXT_PP(1));
	DpwinServerConf *conf;
	ChClient   *client;
	char	   *body;

	conf = dpwin_server_conf(NameStr(*server), GetUserId());
	client = dpwin_ch_client_open(conf, "dpwin-test-");
	body = dpwin_ch_exec(client, sql);
	dpwin_ch_client_close(client);
	PG_RETURN_TEXT_P(cstring_to_text(body));
}

/*
 * The same, started (dpwin_ch_start()) and waited for after work_ms of
 * other work, during which the statement is moved on every 10 ms
 * (dpwin_ch_poll()) when poll is true, as a chunk worker does with a
 * staging digest, or left alone, as during a worker's long INSERT.
 *
 * A gate other than 0 makes the work last, beyond work_ms, until this
 * session can take the shared advisory lock of that key.  A test holds
 * the lock in another session and lets it go once the endpoint's log
 * shows the answer sent, so that the answer has surely arrived before the
 * wait begins, however slow the machine.
 */
PG_FUNCTION_INFO_V1(dpwin__ch_query_started);

Datum
dpwin__ch_query_started(PG_FUNCTION_ARGS)
{
	Name		server = PG_GETARG_NAME(0);
	char	   *sql = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int32		work_ms = PG_GETARG_INT32(2);
	bool		poll = PG_GETARG_BOOL(3);
	int64		gate = PG_GETARG_INT64(4);
	DpwinServerConf *conf;
	ChClient   *client;
	char	   *body;

	conf = dpwin_server_conf(NameStr(*server), GetUserId());
	client = dpwin_ch_client_open(conf, "dpwin-test-");
	dpwin_ch_start(client, sql, "q");
	for (int32 waited = 0;; waited += 10)
	{
		if (waited >= work_ms &&
			(gate == 0 ||
			 DatumGetBool(DirectFunctionCall1(pg_try_advisory_lock_shared_int8,
											  Int64GetDatum(gate)))))
			break;
		pg_usleep(10 * 1000L);
		if (poll)
			dpwin_ch_poll(client);
		CHECK_FOR_INTERRUPTS();
	}
	if (gate != 0)
		(void) DirectFunctionCall1(pg_advisory_unlock_shared_int8, Int64GetDatum(gate));
	body = dpwin_ch_finish(client);
	dpwin_ch_client_close(client);
	PG_RETURN_TEXT_P(cstring_to_text(body));
}

/* ----------------------------------------------------------------
 *		target admission
 * ----------------------------------------------------------------
 */

static void
json_string_array(StringInfo buf, int n, char **items)
{
	appendStringInfoChar(buf, '[');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(buf, ", ");
		escape_json(buf, items[i]);
	}
	appendStringInfoChar(buf, ']');
}

static ChClient *
open_client_for_route(const char *route_name, DpwinRoute **route_out)
{
	DpwinRoute *route = dpwin_route_load(route_name, false);
	DpwinServerConf *conf;

	dpwin_route_check_owner(route, "admit");
	conf = dpwin_server_conf(route->server_name, GetUserId());
	*route_out = route;
	return dpwin_ch_client_open(conf, "dpwin-admit-");
}

PG_FUNCTION_INFO_V1(dpwin__admit_target);

/* dpwin_test.admit_target(route text) RETURNS jsonb */
Datum
dpwin__admit_target(PG_FUNCTION_ARGS)
{
	char	   *route_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	DpwinRoute *route;
	ChClient   *client = open_client_for_route(route_name, &route);
	DpwinTargetInfo *info;
	StringInfoData buf;

	info = dpwin_admission_admit(client, route);
	dpwin_ch_client_close(client);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"database\": ");
	escape_json(&buf, info->database);
	appendStringInfoString(&buf, ", \"table\": ");
	escape_json(&buf, info->table);
	appendStringInfoString(&buf, ", \"uuid\": ");
	escape_json(&buf, info->uuid);
	appendStringInfoString(&buf, ", \"engine_full\": ");
	escape_json(&buf, info->engine_full);
	appendStringInfoString(&buf, ", \"partition_key\": ");
	escape_json(&buf, info->partition_key);
	appendStringInfoString(&buf, ", \"sorting_key\": ");
	escape_json(&buf, info->sorting_key);
	appendStringInfoString(&buf, ", \"columns\": ");
	json_string_array(&buf, info->ncolumns, info->column_names);
	appendStringInfoString(&buf, ", \"types\": ");
	json_string_array(&buf, info->ncolumns, info->column_types);
	appendStringInfo(&buf, ", \"window_precision\": %d, \"window_nullable\": %s",
					 info->window_precision,
					 info->window_nullable ? "true" : "false");
	appendStringInfoString(&buf, ", \"schema_fingerprint\": ");
	escape_json(&buf, info->schema_fingerprint);
	appendStringInfoString(&buf, ", \"quoted_columns\": ");
	escape_json(&buf, info->quoted_columns);
	appendStringInfoChar(&buf, '}');

	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

PG_FUNCTION_INFO_V1(dpwin__probe_exchange);

/* dpwin_test.probe_exchange(route text) RETURNS void */
Datum
dpwin__probe_exchange(PG_FUNCTION_ARGS)
{
	char	   *route_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	DpwinRoute *route;
	ChClient   *client = open_client_for_route(route_name, &route);

	dpwin_admission_probe_exchange(client, route->target_database, "_dpwin_", false);
	dpwin_ch_client_close(client);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(dpwin__forget_exchange_probe);

/* dpwin_test.forget_exchange_probe(server name, database text) RETURNS void */
Datum
dpwin__forget_exchange_probe(PG_FUNCTION_ARGS)
{
	DpwinServerConf *conf = dpwin_server_conf(NameStr(*PG_GETARG_NAME(0)), GetUserId());

	dpwin_exchange_probe_forget(conf->url, text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 *		target lease
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dpwin__fenced_write);

/* Refuse non-superusers, and targets without a dpwin.lease row. */
static int32
testing_target_arg(FunctionCallInfo fcinfo, const char *fn)
{
	int32		target_id;
	Oid			types[1] = {INT4OID};
	Datum		args[1];

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call %s", fn),
				 errdetail("It is a test function: it checks a target's fencing epoch.")));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("target_id must not be NULL")));
	target_id = PG_GETARG_INT32(0);
	args[0] = Int32GetDatum(target_id);
	if (SPI_execute_with_args("SELECT 1 FROM dpwin.lease WHERE target_id = $1",
							  1, types, args, NULL, true, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("dpwin target %d does not exist", target_id),
				 errhint("Targets are the rows of dpwin.lease.")));
	return target_id;
}

/*
 * dpwin_test.fenced_write(target_id, epoch): the fence of every journal write
 * (dpwin_chunk_begin, dpwin_registry_transition, ... all start with it),
 * without the write.  Locks the lease row FOR SHARE until the end of the
 * transaction, so a concurrent epoch bump waits for it, and fails with
 * 55P03 ("... this runner was fenced") when epoch is not the current one.
 */
Datum
dpwin__fenced_write(PG_FUNCTION_ARGS)
{
	int32		target_id;

	SPI_connect();
	target_id = testing_target_arg(fcinfo, "dpwin_test.fenced_write()");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("epoch must not be NULL")));
	dpwin_lease_check_epoch(target_id, PG_GETARG_INT64(1));
	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 *		foreign servers
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dpwin__server_conf);

/*
 * dpwin_test.server_conf(server name) RETURNS TABLE(...): what
 * dpwin_server_conf() makes of a server for the calling user, with the
 * password replaced by whether there is one.
 */
Datum
dpwin__server_conf(PG_FUNCTION_ARGS)
{
	DpwinServerConf *conf;
	TupleDesc	tupdesc;
	Datum		values[8];
	bool		nulls[8] = {false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	conf = dpwin_server_conf(NameStr(*PG_GETARG_NAME(0)), GetUserId());
	values[0] = CStringGetTextDatum(conf->url);
	nulls[1] = conf->ca_file == NULL;
	if (conf->ca_file)
		values[1] = CStringGetTextDatum(conf->ca_file);
	values[2] = BoolGetDatum(conf->verify_peer);
	values[3] = Int32GetDatum(conf->connect_timeout_ms);
	values[4] = Int32GetDatum(conf->request_timeout_ms);
	nulls[5] = conf->settings == NULL;
	if (conf->settings)
		values[5] = CStringGetTextDatum(conf->settings);
	nulls[6] = conf->user == NULL;
	if (conf->user)
		values[6] = CStringGetTextDatum(conf->user);
	values[7] = BoolGetDatum(conf->password != NULL);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
