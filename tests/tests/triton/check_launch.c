/* The C ABI's Triton launch check, with no GPU: opens a Triton build for a simulated sm_90 and
 * checks launches of add_kernel (variant block1024) that fit and that do not. */
#include <stdint.h>
#include <stdio.h>

#include "kbuild_loader.h"

static void report(const char *what, int rc) {
  printf("%s: %d %s\n", what, rc, rc == 0 ? "" : kbuild_last_error());
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: check_launch BUILD_DIR\n");
    return 2;
  }
  kbuild_loader *l = kbuild_loader_open(argv[1], "sm_90", "13.0", 0);
  if (!l) {
    printf("open: %s\n", kbuild_last_error());
    return 1;
  }
  uint64_t x = 0x7f0000001000, y = 0x7f0000002000, out = 0x7f0000003000;
  uint64_t unaligned = 0x7f0000001004;
  int32_t n = 4096, stride = 1;
  int64_t wide = 1;
  void *good[] = {&x, &y, &out, &n, &stride};
  size_t sizes[] = {8, 8, 8, 4, 4};
  report("fits", kbuild_loader_check_triton_args(l, "add", "block1024", good, sizes, 5));
  void *misaligned[] = {&unaligned, &y, &out, &n, &stride};
  report("misaligned",
         kbuild_loader_check_triton_args(l, "add", "block1024", misaligned, sizes, 5));
  report("count", kbuild_loader_check_triton_args(l, "add", "block1024", good, sizes, 4));
  void *too_wide[] = {&x, &y, &out, &n, &wide};
  size_t wide_sizes[] = {8, 8, 8, 4, 8};
  report("size",
         kbuild_loader_check_triton_args(l, "add", "block1024", too_wide, wide_sizes, 5));
  kbuild_function *f = kbuild_loader_get_triton_function(l, "add", "block1024");
  printf("function: %s %s\n", f ? "loaded" : "NULL", f ? "" : kbuild_last_error());
  kbuild_function_free(f);
  kbuild_loader_close(l);
  return 0;
}
