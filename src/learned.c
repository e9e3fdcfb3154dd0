/*-------------------------------------------------------------------------
 *
 * learned.c
 *	  What dpwin has learned about ClickHouse servers, remembered in shared
 *	  memory for every process of the cluster until it restarts.
 *
 *	  A refresh runs in a new coordinator process, so what one process
 *	  learned by asking a server (that EXCHANGE TABLES works in a database,
 *	  say) would be asked again by every refresh.  A fact is remembered
 *	  under a key (the server and the database) with a value that names
 *	  what it depends on (the database's UUID), so that a changed object
 *	  does not match and is asked about again.  Only facts whose loss is
 *	  harmless belong here: the table is small, an entry may be replaced by
 *	  a newer one, a restart forgets them all, and each is asked again then
 *	  (docs/design.md, "The conversation with ClickHouse").
 *
 *	  Keys and values are kept as two 64-bit hashes of their text with
 *	  different seeds.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "learned.h"

#define LEARNED_ENTRIES 256

typedef struct LearnedHash
{
	uint64		h1;
	uint64		h2;
} LearnedHash;

typedef struct LearnedEntry
{
	bool		valid;
	LearnedHash key;
	LearnedHash value;
} LearnedEntry;

typedef struct LearnedShared
{
	slock_t		mutex;
	int			next;			/* the entry the next new fact replaces */
	int			used;
	LearnedEntry entries[LEARNED_ENTRIES];
} LearnedShared;

static LearnedShared *learned = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
learned_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(LearnedShared));
}

static void
learned_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	learned = ShmemInitStruct("dpwin learned", sizeof(LearnedShared), &found);
	if (!found)
	{
		memset(learned, 0, sizeof(LearnedShared));
		SpinLockInit(&learned->mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

void
dpwin_learned_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = learned_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = learned_shmem_startup;
}

static LearnedHash
learned_hash(const char *text)
{
	LearnedHash h;
	size_t		len = strlen(text);

	h.h1 = hash_bytes_extended((const unsigned char *) text, (int) len, 0);
	h.h2 = hash_bytes_extended((const unsigned char *) text, (int) len,
							   UINT64CONST(0x9e3779b97f4a7c15));
	return h;
}

static bool
learned_equal(LearnedHash a, LearnedHash b)
{
	return a.h1 == b.h1 && a.h2 == b.h2;
}

/* The entry of key, or -1; the caller holds the mutex. */
static int
learned_find(LearnedHash key)
{
	for (int i = 0; i < learned->used; i++)
		if (learned->entries[i].valid && learned_equal(learned->entries[i].key, key))
			return i;
	return -1;
}

/* Is the fact named by key remembered, with this value? */
bool
dpwin_learned_known(const char *key, const char *value)
{
	LearnedHash k = learned_hash(key);
	LearnedHash v = learned_hash(value);
	bool		known;
	int			i;

	if (learned == NULL)
		return false;
	SpinLockAcquire(&learned->mutex);
	i = learned_find(k);
	known = i >= 0 && learned_equal(learned->entries[i].value, v);
	SpinLockRelease(&learned->mutex);
	return known;
}

/* Remember key's value, in place of what it had. */
void
dpwin_learned_remember(const char *key, const char *value)
{
	LearnedHash k = learned_hash(key);
	LearnedHash v = learned_hash(value);
	int			i;

	if (learned == NULL)
		return;
	SpinLockAcquire(&learned->mutex);
	i = learned_find(k);
	if (i < 0)
	{
		i = learned->next;
		learned->next = (learned->next + 1) % LEARNED_ENTRIES;
		if (learned->used < LEARNED_ENTRIES)
			learned->used++;
	}
	learned->entries[i].valid = true;
	learned->entries[i].key = k;
	learned->entries[i].value = v;
	SpinLockRelease(&learned->mutex);
}

void
dpwin_learned_forget(const char *key)
{
	LearnedHash k = learned_hash(key);
	int			i;

	if (learned == NULL)
		return;
	SpinLockAcquire(&learned->mutex);
	i = learned_find(k);
	if (i >= 0)
		learned->entries[i].valid = false;
	SpinLockRelease(&learned->mutex);
}
