/*
** kernel_image.h — how many parameters each kernel of a CUDA image has, read from the image
** itself, so that kernel.cu asks the runtime about exactly those (cudaFuncGetParamInfo past the
** last one fails, and under compute-sanitizer every such probe is an "invalid argument"
** record; CUDA 13.0 has no call that returns the count).
**
**   - a cubin (ELF, what NVRTC gives qlua): each kernel's .nv.info.<name> section holds one
**     KPARAM_INFO record per parameter (ordinal, offset, size) and CBANK_PARAM_SIZE, the
**     bytes they take; a kernel's table is kept only when its ordinals are 0..n-1 and the
**     last parameter ends where CBANK_PARAM_SIZE says (records of a format this file does
**     not know make the kernel unknown);
**   - PTX: the .param entries of each .entry declaration;
**   - a fatbin: the cubins it holds uncompressed.
** A kernel not found here (a compressed fatbin, an unknown record) is left to kernel.cu's
** probe. Plain C that nvcc also compiles (kernel.cu) and that a host compiler builds for the
** spec (spec/gpu/kernel_core_spec.lua reads NVRTC's own cubins and PTX with it). Every read is
** bounds-checked: an image is the user's bytes.
*/
#ifndef QLUA_RTC_IMAGE_H
#define QLUA_RTC_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RTC_IMAGE_MAXPARAMS 64  /* as QT_KERNEL_MAXPARAMS: more makes a kernel unknown */

typedef struct rtc_kernel_params {
  char *name;                   /* the kernel's symbol (a mangled name for C++) */
  int nparams;
  bool sized;                   /* offset and size known (a cubin; PTX gives the count) */
  uint32_t offset[RTC_IMAGE_MAXPARAMS], size[RTC_IMAGE_MAXPARAMS];
} rtc_kernel_params;

typedef struct rtc_image_params {
  int n, cap;
  rtc_kernel_params *kernels;
} rtc_image_params;

static inline uint16_t rtc_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t rtc_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t rtc_u64(const unsigned char *p) {
  return (uint64_t)rtc_u32(p) | (uint64_t)rtc_u32(p + 4) << 32;
}

/* Adds (or, for a name seen before, replaces) a kernel's entry; false when out of memory. */
static inline bool rtc_image_add(rtc_image_params *t, const char *name, size_t len,
                                 const rtc_kernel_params *k) {
  for (int i = 0; i < t->n; i++)
    if (strlen(t->kernels[i].name) == len && memcmp(t->kernels[i].name, name, len) == 0) {
      char *keep = t->kernels[i].name;
      t->kernels[i] = *k;
      t->kernels[i].name = keep;
      return true;
    }
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 8;
    rtc_kernel_params *grown =
        (rtc_kernel_params *)realloc(t->kernels, sizeof *grown * (size_t)cap);
    if (grown == NULL) return false;
    t->kernels = grown;
    t->cap = cap;
  }
  char *copy = (char *)malloc(len + 1);
  if (copy == NULL) return false;
  memcpy(copy, name, len);
  copy[len] = '\0';
  t->kernels[t->n] = *k;
  t->kernels[t->n].name = copy;
  t->n++;
  return true;
}

/* One .nv.info.<kernel> section: the parameters, or false when it holds a record this
** reader does not know or the records do not add up. */
static inline bool rtc_nvinfo_params(const unsigned char *p, size_t n, rtc_kernel_params *k) {
  enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4, KPARAM_INFO = 0x17,
         CBANK_PARAM_SIZE = 0x19 };
  memset(k, 0, sizeof *k);
  bool seen[RTC_IMAGE_MAXPARAMS] = { false };
  int64_t total = -1;
  int count = 0;
  size_t at = 0;
  while (at + 4 <= n) {
    unsigned fmt = p[at], attr = p[at + 1];
    if (fmt == EIFMT_NVAL || fmt == EIFMT_BVAL || fmt == EIFMT_HVAL) {  /* 4 bytes each */
      if (fmt == EIFMT_HVAL && attr == CBANK_PARAM_SIZE) total = rtc_u16(p + at + 2);
      at += 4;
    } else if (fmt == EIFMT_SVAL) {
      size_t len = rtc_u16(p + at + 2);
      if (len > n - at - 4) return false;
      const unsigned char *v = p + at + 4;
      if (attr == KPARAM_INFO) {
        if (len < 12) return false;
        unsigned ordinal = rtc_u16(v + 4);
        if (ordinal >= RTC_IMAGE_MAXPARAMS || seen[ordinal]) return false;
        seen[ordinal] = true;
        k->offset[ordinal] = rtc_u16(v + 6);
        k->size[ordinal] = (rtc_u32(v + 8) >> 18) & 0x3fff;
        count++;
      }
      at += 4 + len;
    } else {
      return false;  /* a value of a size this reader does not know: give up on it */
    }
  }
  if (at != n) return false;
  int64_t end = 0;
  for (int i = 0; i < count; i++) {
    if (!seen[i] || k->size[i] == 0) return false;  /* ordinals 0..count-1, each sized */
    if ((int64_t)k->offset[i] + k->size[i] > end) end = (int64_t)k->offset[i] + k->size[i];
  }
  if (total >= 0 ? end != total : count != 0) return false;
  k->nparams = count;
  k->sized = true;
  return true;
}

/* A cubin at p (n bytes at most): the kernels of its .nv.info.<name> sections. Returns the
** bytes the ELF spans (0: not an ELF of the CUDA machine). */
static inline size_t rtc_image_read_elf(rtc_image_params *t, const unsigned char *p, size_t n) {
  if (n < 64 || memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2 || p[5] != 1) return 0;
  if (rtc_u16(p + 18) != 190) return 0;  /* EM_CUDA */
  uint64_t shoff = rtc_u64(p + 0x28);
  unsigned shentsize = rtc_u16(p + 0x3a), shnum = rtc_u16(p + 0x3c), shstrndx = rtc_u16(p + 0x3e);
  if (shentsize < 64 || shnum == 0 || shstrndx >= shnum || shoff > n ||
      (uint64_t)shnum * shentsize > n - shoff)
    return 0;
  size_t span = (size_t)(shoff + (uint64_t)shnum * shentsize);
  const unsigned char *strsh = p + shoff + (size_t)shstrndx * shentsize;
  uint64_t stroff = rtc_u64(strsh + 0x18), strsize = rtc_u64(strsh + 0x20);
  if (stroff > n || strsize > n - stroff) return span;
  for (unsigned s = 0; s < shnum; s++) {
    const unsigned char *sh = p + shoff + (size_t)s * shentsize;
    uint64_t name = rtc_u32(sh), off = rtc_u64(sh + 0x18), size = rtc_u64(sh + 0x20);
    if (name >= strsize || off > n || size > n - off) continue;
    if (rtc_u32(sh + 4) != 8 && off + size > span) span = (size_t)(off + size);  /* not NOBITS */
    const char *sname = (const char *)p + stroff + name;
    size_t room = (size_t)(strsize - name);
    size_t len = strnlen(sname, room);
    if (len == room || len <= 9 || memcmp(sname, ".nv.info.", 9) != 0) continue;
    rtc_kernel_params k;
    if (rtc_nvinfo_params(p + off, (size_t)size, &k)) rtc_image_add(t, sname + 9, len - 9, &k);
  }
  return span;
}

/* PTX text: the .param entries between the parentheses of each `.entry name (`. */
static inline void rtc_image_read_ptx(rtc_image_params *t, const char *s, size_t n) {
  for (size_t at = 0; at + 6 < n; at++) {
    if (memcmp(s + at, ".entry", 6) != 0 || (at > 0 && s[at - 1] != ' ' && s[at - 1] != '\t' &&
                                             s[at - 1] != '\n'))
      continue;
    size_t q = at + 6;
    while (q < n && (s[q] == ' ' || s[q] == '\t')) q++;
    size_t name = q;
    while (q < n && (s[q] == '_' || s[q] == '$' || s[q] == '.' || (s[q] >= '0' && s[q] <= '9') ||
                     (s[q] >= 'a' && s[q] <= 'z') || (s[q] >= 'A' && s[q] <= 'Z')))
      q++;
    size_t name_len = q - name;
    while (q < n && (s[q] == ' ' || s[q] == '\t' || s[q] == '\n' || s[q] == '\r')) q++;
    if (name_len == 0 || q >= n || s[q] != '(') continue;
    rtc_kernel_params k;
    memset(&k, 0, sizeof k);
    bool ok = true;
    for (q++; q < n && s[q] != ')'; q++) {
      if (s[q] == '/' && q + 1 < n && s[q + 1] == '/') {
        while (q < n && s[q] != '\n') q++;
      } else if (s[q] == '.' && q + 6 <= n && memcmp(s + q, ".param", 6) == 0) {
        if (k.nparams == RTC_IMAGE_MAXPARAMS) ok = false;
        else k.nparams++;
        q += 5;
      }
    }
    if (ok && q < n) rtc_image_add(t, s + name, name_len, &k);
    at = q;
  }
}

/* Every kernel the image at p tells about: a cubin, PTX text, or the cubins a fatbin holds
** (searched for, as a compressed one would not show). Best effort: what cannot be read is
** simply absent from t. */
static inline void rtc_image_read(rtc_image_params *t, const void *image, size_t n) {
  const unsigned char *p = (const unsigned char *)image;
  memset(t, 0, sizeof *t);
  if (n >= 4 && memcmp(p, "\x7f" "ELF", 4) == 0) {
    rtc_image_read_elf(t, p, n);
  } else if (n >= 4 && rtc_u32(p) == 0xba55ed50u) {  /* fatbin */
    for (size_t at = 0; at + 64 <= n;) {
      const unsigned char *e = (const unsigned char *)memchr(p + at, 0x7f, n - at);
      if (e == NULL) break;
      size_t span = rtc_image_read_elf(t, e, n - (size_t)(e - p));
      at = (size_t)(e - p) + (span > 0 ? span : 1);
    }
  } else {
    rtc_image_read_ptx(t, (const char *)p, n);
  }
}

static inline const rtc_kernel_params *rtc_image_find(const rtc_image_params *t,
                                                      const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->kernels[i].name, name) == 0) return &t->kernels[i];
  return NULL;
}

static inline void rtc_image_free(rtc_image_params *t) {
  for (int i = 0; i < t->n; i++) free(t->kernels[i].name);
  free(t->kernels);
  memset(t, 0, sizeof *t);
}

#endif
