/*
 * control.c - the test-only control port: faults, holds, the query_id
 * mode, and what the endpoint is doing (query log, running statements,
 * connections).  Plain HTTP on loopback, no authentication; see
 * docs/endpoint.md, "The control port".
 */
#include <stdlib.h>
#include <string.h>

#include "chendpoint.h"

static enum MHD_Result
control_reply(struct MHD_Connection *c, unsigned int status, char *text)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(strlen(text), text,
	    MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	    "text/plain; charset=UTF-8");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static const char *
arg(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result
control_fault(struct MHD_Connection *c)
{
	const char *mode = arg(c, "mode");
	const char *count_s = arg(c, "count");
	const char *code_s = arg(c, "code");
	const char *ms_s = arg(c, "ms");
	long count = 1, code = 0, ms = 0;
	const char *err;

	if (mode == NULL)
		return control_reply(c, 400, xstrdup("mode is required\n"));
	if (count_s != NULL && parse_long(count_s, &count) != 0)
		return control_reply(c, 400, xstrdup("bad count\n"));
	if (code_s != NULL && parse_long(code_s, &code) != 0)
		return control_reply(c, 400, xstrdup("bad code\n"));
	if (ms_s != NULL && parse_long(ms_s, &ms) != 0)
		return control_reply(c, 400, xstrdup("bad ms\n"));
	if (ms_s == NULL && (strcmp(mode, "delay") == 0 ||
	    strcmp(mode, "idle_close") == 0))
		ms = -1;
	err = fault_add(mode, arg(c, "pattern"), count, code, ms,
	    arg(c, "form"));
	if (err != NULL)
		return control_reply(c, 400, xstrdup(err));
	return control_reply(c, 200, xstrdup("Ok.\n"));
}

static enum MHD_Result
control_log(struct MHD_Connection *c)
{
	const char *since_s = arg(c, "since");
	long since = 0;
	struct buf out = {0};

	if (since_s != NULL && (parse_long(since_s, &since) != 0 || since < 0))
		return control_reply(c, 400, xstrdup("bad since\n"));
	buf_append(&out, "", 0);
	qlog_copy_since((size_t) since, &out);
	return control_reply(c, 200, out.data);
}

/* GET /query_ids says the mode; POST /query_ids?mode=visible|hidden sets it. */
static enum MHD_Result
control_query_ids(struct MHD_Connection *c, int is_post)
{
	const char *m = arg(c, "mode");

	if (is_post) {
		if (m != NULL && strcmp(m, "visible") == 0)
			qid_mode_set(QID_VISIBLE);
		else if (m != NULL && strcmp(m, "hidden") == 0)
			qid_mode_set(QID_HIDDEN);
		else
			return control_reply(c, 400,
			    xstrdup("mode is visible or hidden\n"));
	}
	return control_reply(c, 200, xstrdup(qid_mode_get() == QID_VISIBLE ?
	    "visible\n" : "hidden\n"));
}

/* A listing built by one of the describe functions. */
static enum MHD_Result
control_listing(struct MHD_Connection *c, void (*describe)(struct buf *))
{
	struct buf out = {0};

	buf_append(&out, "", 0);
	describe(&out);
	return control_reply(c, 200, out.data);
}

enum MHD_Result
control_handler(void *cls, struct MHD_Connection *c, const char *url,
		const char *method, const char *version,
		const char *upload_data, size_t *upload_data_size,
		void **con_cls)
{
	static int first_call_marker;
	int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;

	(void) cls;
	(void) version;
	(void) upload_data;
	if (*con_cls == NULL) {
		*con_cls = &first_call_marker;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		*upload_data_size = 0;	/* bodies carry nothing here */
		return MHD_YES;
	}
	if (strcmp(url, "/ping") == 0)
		return control_reply(c, 200, xstrdup("Ok.\n"));
	if (strcmp(url, "/fault") == 0 && is_post)
		return control_fault(c);
	if (strcmp(url, "/faults/clear") == 0 && is_post) {
		faults_clear();
		return control_reply(c, 200, xstrdup("Ok.\n"));
	}
	if (strcmp(url, "/faults") == 0 && !is_post)
		return control_listing(c, faults_describe);
	if (strcmp(url, "/release") == 0 && is_post)
		return control_reply(c, 200, xasprintf("%d\n",
		    holds_release(arg(c, "pattern"))));
	if (strcmp(url, "/holds") == 0 && !is_post)
		return control_listing(c, holds_describe);
	if (strcmp(url, "/sockets") == 0 && !is_post)
		return control_listing(c, sockets_describe);
	if (strcmp(url, "/query_ids") == 0)
		return control_query_ids(c, is_post);
	if (strcmp(url, "/running") == 0 && !is_post)
		return control_listing(c, running_describe);
	if (strcmp(url, "/connections") == 0 && !is_post)
		return control_listing(c, connections_describe);
	if (strcmp(url, "/sessions") == 0 && !is_post)
		return control_listing(c, sessions_describe);
	if (strcmp(url, "/log") == 0 && !is_post)
		return control_log(c);
	return control_reply(c, 404, xasprintf("no such control endpoint: "
	    "%s %s\n", method, url));
}
