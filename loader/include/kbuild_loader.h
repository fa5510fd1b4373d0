/* kbuild_loader.h — the C ABI of kbuild-loader (libkbuild_capi.so, crate loader/capi).
 *
 * Open a kbuild build directory (or manifest) for the GPU of this machine, or for a simulated
 * device; explain which code object each kernel gets and why; load a kernel's function
 * (sha256 checked before load, registers / shared / stack compared with the manifest after
 * load); launch it. Nothing here needs a CUDA or ROCm installation at build time: the drivers
 * are opened at run time.
 *
 * Errors: functions returning a pointer return NULL, functions returning int return -1; the
 * message is then in kbuild_last_error() on the same thread. Strings returned as `char *`
 * are owned by the caller and freed with kbuild_string_free().
 */
#ifndef KBUILD_LOADER_H
#define KBUILD_LOADER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct KbuildLoader kbuild_loader;
typedef struct KbuildFunction kbuild_function;

/* flags of kbuild_loader_open */
#define KBUILD_NO_GENERIC 1u /* a simulated AMD runtime loads no generic code objects */

/* Where and how wide to launch; stream is a CUstream / hipStream_t (NULL: default stream). */
typedef struct kbuild_launch_config {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes; /* dynamic shared memory (LDS) */
  void *stream;
} kbuild_launch_config;

/* Open `path` (a build directory holding manifest.json, a manifest file, or a bundle).
 * A bundle gets the signature policy of the environment, as `kbuild pull` applies it:
 * KBUILD_SIGNATURE_POLICY (require | warn | off; default warn) and the trusted public keys
 * listed in KBUILD_TRUSTED_KEYS (`.pub` files, `:`-separated). Under require, an unsigned
 * bundle is refused (NULL). The C ABI does not read the kbuild config file: set these.
 * A build directory is local and unsigned: no policy applies to it.
 * device: NULL (KBUILD_DEVICE if set, else detect), "auto" (detect), or a target to simulate:
 *         "sm_90", "9.0", "gfx1151", "gfx90a:sramecc+:xnack-". A simulated device can be
 *         explained but not loaded onto.
 * driver: NULL, or the CUDA driver version of a simulated NVIDIA device ("13.0").
 * Returns NULL on error (no GPU and no device given, unreadable manifest, unknown target). */
kbuild_loader *kbuild_loader_open(const char *path, const char *device, const char *driver,
                                  unsigned flags);

/* Close (NULL is ignored). Functions taken from the loader stay valid. */
void kbuild_loader_close(kbuild_loader *loader);

/* The device selected for ("sm_90"), owned by the loader. */
const char *kbuild_loader_device(const kbuild_loader *loader);

/* 1 when every kernel has a code object for the device, 0 when some has none, -1 on error. */
int kbuild_loader_complete(const kbuild_loader *loader);

/* The selection trace: json = 0 gives text, json = 1 gives kbuild.explain/v1 JSON
 * ({"schema", "device", "kernels": [{"kernel", "variant", "selected", "candidates"}]}).
 * Free with kbuild_string_free. */
char *kbuild_loader_explain(const kbuild_loader *loader, int json);

/* The target selected for `kernel` (variant may be NULL), e.g. "sm_90a"; NULL with the
 * no-match message (device, available targets, the kbuild command to build one). */
char *kbuild_loader_selected_target(const kbuild_loader *loader, const char *kernel,
                                    const char *variant);

/* Load the kernel's object (once) and look up `entry`. NULL on error: sha256 mismatch
 * (swapped object), attribute mismatch (stale manifest), simulated device, no match. */
kbuild_function *kbuild_loader_get_function(const kbuild_loader *loader, const char *kernel,
                                            const char *variant, const char *entry);

/* Free a function (NULL is ignored). */
void kbuild_function_free(kbuild_function *function);

/* Launch: args[i] points at the value of parameter i (as cuLaunchKernel takes them).
 * 0 on success, -1 on error (block over the kernel's launch bound, driver error). */
int kbuild_function_launch(const kbuild_function *function, const kbuild_launch_config *config,
                           void **args, unsigned nargs);

/* The last error of this thread ("" if none); valid until the next call on this thread. */
const char *kbuild_last_error(void);

/* Free a string this library returned (NULL is ignored). */
void kbuild_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* KBUILD_LOADER_H */
