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
 *
 * Checked launches: kbuild_function_launch_checked compares the arguments with the kernel's
 * parameters as the build recorded them (manifest `params`, carried by manifest.kbi) before
 * the driver is called: the count of caller-visible parameters (AMD hidden arguments, which
 * the runtime passes, are not counted) and each argument's size in bytes. A mismatch is -1
 * with a message naming the kernel, the argument and the parameter:
 *   "rmsnorm_f32: 5 arguments given, the kernel takes 6"
 *   "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (int n)"
 * (the parameter's C++ type and name where the object records them, else its kind:
 * "value", "pointer", "pointer or value"). Not checked: what a pointer points at, whether a
 * value of the right size has the right type (an int for a float), and the place of each
 * argument (sizes alone do not give alignment; the driver copies each value to the kernel's
 * own offset). A package without parameters (a manifest.kbi of version 3, a manifest written
 * before they were recorded; rebuild to get them) launches unchecked:
 * kbuild_function_params_known says which. kbuild_function_launch checks nothing but the
 * launch configuration; it is kept for existing callers.
 */
#ifndef KBUILD_LOADER_H
#define KBUILD_LOADER_H

#include <stddef.h>

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

/* Launch, checked (see the top of this file): args[i] points at the value of parameter i (as
 * cuLaunchKernel takes them) and sizes[i] is its size in bytes (sizeof), count of each.
 * 0 on success, -1 on error: arguments that do not fit the kernel's parameters (the driver
 * never sees the launch), block over the kernel's launch bound, driver error. */
int kbuild_function_launch_checked(const kbuild_function *function,
                                   const kbuild_launch_config *config, void *const *args,
                                   const size_t *sizes, size_t count);

/* Launch UNCHECKED: args[i] points at the value of parameter i; nothing compares them with
 * the kernel's parameters (only the launch configuration is checked). Kept for existing
 * callers: use kbuild_function_launch_checked. 0 on success, -1 on error. */
int kbuild_function_launch(const kbuild_function *function, const kbuild_launch_config *config,
                           void **args, unsigned nargs);

/* 1 when launches of `function` are checked (the package carries its parameters), 0 when
 * they are not (rebuild with this kbuild to get them), -1 on error. `count` and `hidden`
 * (either may be NULL) get the number of caller-visible parameters and of hidden ones. */
int kbuild_function_params_known(const kbuild_function *function, size_t *count,
                                 size_t *hidden);

/* Check argument sizes for `entry` of `kernel` (variant may be NULL) exactly as
 * kbuild_function_launch_checked would, without loading or launching (works for a simulated
 * device): 1 checked and they fit, 0 nothing to check against, -1 refused (the message as
 * above) or error. */
int kbuild_loader_check_args(const kbuild_loader *loader, const char *kernel,
                             const char *variant, const char *entry, const size_t *sizes,
                             size_t count);

/* Triton kernels (Kbuild.toml `language = "triton"`): the build records how each object must
 * be launched (block = num_warps x warp size, dynamic shared memory, programmatic dependent
 * launch, clusters, cooperative grids, two trailing scratch pointers) and what the code
 * assumes of its arguments (values
 * divisible by 16). These functions apply that record.
 *
 * kbuild_loader_get_triton_function: the kernel's function (its only entry) with the record;
 * NULL on error as kbuild_loader_get_function, or for a kernel not built from Triton. */
kbuild_function *kbuild_loader_get_triton_function(const kbuild_loader *loader,
                                                   const char *kernel, const char *variant);

/* Launch `grid` programs (3 values) on `stream` (NULL: default stream), as Triton's launcher
 * does: each program a cluster of num_ctas blocks, cooperative when recorded. args[i] points
 * at the value of the record's parameter i, scratch pointers left out (kbuild passes them:
 * NULL, or memory it allocates for this launch in stream order and frees after it, CUDA only),
 * sizes[i] is its size, count of each. Checked before the driver: the count (the message
 * names the parameters), each pointer or int the build assumed divisible by 16
 *   "add: argument `x_ptr` (*fp32): its address 0x7f0000001004 is not a multiple of 16, ..."
 * and the sizes, as kbuild_function_launch_checked. 0 on success, -1 on error. */
int kbuild_function_launch_triton(const kbuild_function *function, const unsigned *grid,
                                  void *stream, void *const *args, const size_t *sizes,
                                  size_t count);

/* Check a Triton launch of `kernel` (variant may be NULL) exactly as
 * kbuild_function_launch_triton would, without loading or launching (works for a simulated
 * device): 0 the arguments fit, -1 refused (the message as above) or error. */
int kbuild_loader_check_triton_args(const kbuild_loader *loader, const char *kernel,
                                    const char *variant, void *const *args,
                                    const size_t *sizes, size_t count);

/* The last error of this thread ("" if none); valid until the next call on this thread. */
const char *kbuild_last_error(void);

/* Free a string this library returned (NULL is ignored). */
void kbuild_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* KBUILD_LOADER_H */
