/*-------------------------------------------------------------------------
 *
 * learned.c
 *	  What dpwin has learned about ClickHouse servers, remembered in shared
 *	  memory for every process of the cluster until it restarts.
 *
 *	  A refresh runs in a new coordinator process, so what one process
 *	  learned by asking a server (that EXCHANGE TABLES works in a database,
 *	  say) would be asked again by every refresh.  A fact is remembered
 *	  under a key that names what it depends on (the server, the database
 *	  and the database's UUID, say), so that a changed object is a new key
 *	  and is asked about again.  Only facts whose loss is harmless belong
 *	  here: the table is small, an entry may be replaced by a newer one, a
 *	  restart forgets them all, and each is asked again then
 *	  (docs/design.md, "The conversation with ClickHouse").
 *
 *	  A key is kept as two 64-bit hashes of its text with different seeds.
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

typedef struct LearnedKey
{
	uint64		h1;
	uint64		h2;
	bool		valid;
} LearnedKey;

typedef struct LearnedShared
{
	slock_t		mutex;
	int			next;			/* the entry the next new fact replaces */
	int			used;
	LearnedKey	keys[LEARNED_ENTRIES];
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

static LearnedKey
learned_key(const char *key)
{
	LearnedKey	k;
	size_t		len = strlen(key);

	k.h1 = hash_bytes_extended((const unsigned char *) key, (int) len, 0);
	k.h2 = hash_bytes_extended((const unsigned char *) key, (int) len,
							   UINT64CONST(0x9e3779b97f4a7c15));
	k.valid = true;
	return k;
}

/* The entry holding k, or -1; the caller holds the mutex. */
static int
learned_find(LearnedKey k)
{
	for (int i = 0; i < learned->used; i++)
		if (learned->keys[i].valid &&
			learned->keys[i].h1 == k.h1 && learned->keys[i].h2 == k.h2)
			return i;
	return -1;
}

bool
dpwin_learned_known(const char *key)
{
	LearnedKey	k = learned_key(key);
	bool		known;

	if (learned == NULL)
		return false;
	SpinLockAcquire(&learned->mutex);
	known = learned_find(k) >= 0;
	SpinLockRelease(&learned->mutex);
	return known;
}

void
dpwin_learned_remember(const char *key)
{
	LearnedKey	k = learned_key(key);

	if (learned == NULL)
		return;
	SpinLockAcquire(&learned->mutex);
	if (learned_find(k) < 0)
	{
		learned->keys[learned->next] = k;
		learned->next = (learned->next + 1) % LEARNED_ENTRIES;
		if (learned->used < LEARNED_ENTRIES)
			learned->used++;
	}
	SpinLockRelease(&learned->mutex);
}

void
dpwin_learned_forget(const char *key)
{
	LearnedKey	k = learned_key(key);
	int			i;

	if (learned == NULL)
		return;
	SpinLockAcquire(&learned->mutex);
	i = learned_find(k);
	if (i >= 0)
		learned->keys[i].valid = false;
	SpinLockRelease(&learned->mutex);
}
