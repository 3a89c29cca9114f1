/* NFSv4 ACLs over nasgwd's POSIX ACLs: the mapping is Ganesha's own
 * (posix_acls.c, as FSAL_VFS and FSAL_CEPH use it, after knfsd's), so an
 * NFSv4 client sees and sets the ACL that FUSE's getfacl/setfacl (and,
 * later, Samba) see and set. nasgwd keeps the POSIX ACL, syncs the mode and
 * enforces it on every request; Ganesha evaluates the mapped ACEs for its
 * own access checks. An object without a POSIX ACL (the attribute's flags
 * say so) shows the ACL its mode makes, as knfsd shows it, at no extra
 * round trip. It must have one: Ganesha's cache trusts an ACL only when
 * the attributes carry one, and checks access with ATTR_ACL asked for, so
 * an object shown without one cost a GETATTR to nasgwd on every access
 * check (an NFSv4 listing paid one per entry, every time). */
#include "nasgw_int.h"

#include <errno.h>
#include <stdlib.h>

#include "nfs4_acls.h"
#include "posix_acls.h"

/* An ACL in xattr form: 4 bytes and 8 per entry, at most 1024 entries
 * (fs::kAclEntriesMax). */
#define NASGW_ACL_XATTR_MAX (4 + 8 * 1024)

static int get_posix_acl(nasgw_client *c, const nasgw_cred *cr,
			 const nasgw_handle *h, const char *name, acl_t *out)
{
	char *buf = gsh_malloc(NASGW_ACL_XATTR_MAX);
	int64_t n = nasgw_getxattr(c, cr, h, name, buf, NASGW_ACL_XATTR_MAX);

	*out = NULL;
	if (n == -ENODATA) {	/* removed since the attributes were read */
		gsh_free(buf);
		return 0;
	}
	if (n < 0) {
		gsh_free(buf);
		return (int)n;
	}
	*out = xattr_2_posix_acl((struct acl_ea_header *)buf, (size_t)n);
	gsh_free(buf);
	if (*out == NULL) {
		LogMajor(COMPONENT_FSAL,
			 "FSAL_NASGW: %s of %" PRIu64 " is not a POSIX ACL Ganesha can read",
			 name, h->ino);
		return -EIO;
	}
	return 0;
}

int nasgw_acl_get(nasgw_client *c, const nasgw_cred *cr, const nasgw_attr *a,
		  struct fsal_attrlist *attrs)
{
	const bool is_dir = a->type == NASGW_TYPE_DIR;
	acl_t e_acl = NULL, i_acl = NULL;
	fsal_acl_data_t acldata;
	fsal_acl_status_t aclstatus;
	fsal_ace_t *pace;
	int e_count = 0, i_count = 0, n = 0, rc = 0;

	if (attrs->acl != NULL) {
		nfs4_acl_release_entry(attrs->acl);
		attrs->acl = NULL;
	}
	/* The access ACL, or the mode's when there is none (as libacl's
	 * acl_get_fd gives it). */
	if (a->flags & NASGW_ATTR_ACL_ACCESS)
		rc = get_posix_acl(c, cr, &a->handle, ACL_EA_ACCESS, &e_acl);
	if (rc == 0 && e_acl == NULL)
		e_acl = acl_from_mode(a->mode & 0777);
	if (rc == 0 && is_dir && (a->flags & NASGW_ATTR_ACL_DEFAULT))
		rc = get_posix_acl(c, cr, &a->handle, ACL_EA_DEFAULT, &i_acl);
	if (rc != 0)
		goto out;
	e_count = e_acl != NULL ? ace_count(e_acl) : 0;
	i_count = i_acl != NULL ? ace_count(i_acl) : 0;
	acldata.naces = 2 * (e_count + i_count);
	if (acldata.naces == 0)
		goto out;
	acldata.aces = nfs4_ace_alloc(acldata.naces);
	pace = acldata.aces;
	if (e_count > 0)
		n += posix_acl_2_fsal_acl(e_acl, is_dir, false, &pace);
	if (i_count > 0)
		n += posix_acl_2_fsal_acl(i_acl, true, true, &pace);
	acldata.aces = gsh_realloc(acldata.aces, n * sizeof(fsal_ace_t));
	acldata.naces = n;
	attrs->acl = nfs4_acl_new_entry(&acldata, &aclstatus);
	if (attrs->acl == NULL) {
		LogCrit(COMPONENT_FSAL, "FSAL_NASGW: cannot make an NFSv4 ACL (%d)",
			(int)aclstatus);
		rc = -ENOMEM;
		goto out;
	}
	attrs->valid_mask |= ATTR_ACL;
out:
	if (e_acl != NULL)
		acl_free(e_acl);
	if (i_acl != NULL)
		acl_free(i_acl);
	return rc;
}

/* One POSIX ACL of the NFSv4 ACL (type: access or default) to nasgwd; a
 * default ACL the NFSv4 ACL has no inheritable entries for is removed. */
static int set_posix_acl(nasgw_client *c, const nasgw_cred *cr,
			 const nasgw_handle *h, fsal_acl_t *nfs4,
			 acl_type_t type)
{
	const char *name = type == ACL_TYPE_ACCESS ? ACL_EA_ACCESS :
						      ACL_EA_DEFAULT;
	acl_t acl = fsal_acl_2_posix_acl(nfs4, type);
	void *value = NULL;
	size_t size;
	int count, rc;

	if (acl == NULL) {
		if (type == ACL_TYPE_DEFAULT) {
			rc = nasgw_removexattr(c, cr, h, name);
			return rc == -ENODATA ? 0 : rc;
		}
		return -EINVAL;
	}
	if (acl_valid(acl) != 0) {
		acl_free(acl);
		return -EINVAL;	/* not a POSIX ACL: NFS4ERR_INVAL */
	}
	count = acl_entries(acl);
	size = posix_acl_xattr_size(count);
	value = gsh_malloc(size);
	rc = posix_acl_2_xattr(acl, value, size);
	acl_free(acl);
	if (rc < 0) {
		gsh_free(value);
		return -EINVAL;
	}
	rc = nasgw_setxattr(c, cr, h, name, value, size, 0);
	gsh_free(value);
	return rc;
}

int nasgw_acl_set(nasgw_client *c, const nasgw_cred *cr, const nasgw_handle *h,
		  bool is_dir, fsal_acl_t *nfs4)
{
	int rc;

	if (nfs4 == NULL)
		return -EINVAL;
	rc = set_posix_acl(c, cr, h, nfs4, ACL_TYPE_ACCESS);
	if (rc == 0 && is_dir)
		rc = set_posix_acl(c, cr, h, nfs4, ACL_TYPE_DEFAULT);
	return rc;
}
