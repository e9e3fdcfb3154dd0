/* dpwin — test-only functions of the RowBinary encoder and the digest
 *
 * These expose rowbinary.c and digest.c to SQL so that the encoder parity
 * test (test/t/020_rowbinary_parity.t) can compare dpwin's bytes with
 * ClickHouse's formatRow('RowBinary', ...).  They read no tables and have
 * no side effects; the leading underscore marks them as not part of the
 * user interface.
 */

/*
 * The RowBinary bytes of one value written as ClickHouse type ch_type (as
 * system.columns.type prints it).  The value counts as NOT NULL unless
 * ch_type is Nullable.  With window_value, fidelity errors name the row by
 * it, as they do during a refresh.
 */
CREATE FUNCTION dpwin._encode_rowbinary(value anyelement, ch_type text,
										window_value timestamptz DEFAULT NULL)
	RETURNS bytea
	LANGUAGE C STABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__encode_rowbinary';

/* Reference SipHash-2-4 under key (k0, k1); the uint64 as two's complement. */
CREATE FUNCTION dpwin._siphash24(k0 bigint, k1 bigint, data bytea)
	RETURNS bigint
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__siphash24';

/* NULL if a column of type typ(typmod) can be written as ch_type, else why not. */
CREATE FUNCTION dpwin._rb_type_parity(typ regtype, typmod integer,
									  notnull boolean, ch_type text)
	RETURNS text
	LANGUAGE C STRICT STABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__rb_type_parity';

/* The ClickHouse type dpwin would choose for such a column (NULL: none). */
CREATE FUNCTION dpwin._rb_default_ch_type(typ regtype, typmod integer,
										  notnull boolean)
	RETURNS text
	LANGUAGE C STRICT STABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__rb_default_ch_type';

/* The digest ("count:sum1:sum2") of RowBinary rows under key "k1a:k1b:k2a:k2b". */
CREATE FUNCTION dpwin._digest_rows(key text, rows bytea[])
	RETURNS text
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__digest_rows';

/* The ClickHouse select-list computing the same digest over given columns. */
CREATE FUNCTION dpwin._digest_ch_select_list(key text, quoted_columns text)
	RETURNS text
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__digest_ch_select_list';
