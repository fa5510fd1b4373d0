/* Explain which code object each kernel of a kbuild build gets on a device.
 *
 *   gcc -I loader/include examples/c/explain.c -L target/debug -lkbuild_capi -o explain
 *   LD_LIBRARY_PATH=target/debug ./explain target/kbuild gfx1151 [--json]
 *
 * Exit 0 when every kernel has an object, 1 when some has none, 2 on error. With a real GPU,
 * pass "auto" and the loader also loads rmsnorm_f32 and reports what it got. */
#include <stdio.h>
#include <string.h>

#include "kbuild_loader.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BUILD_DIR DEVICE|auto [--json]\n", argv[0]);
    return 2;
  }
  int json = argc > 3 && strcmp(argv[3], "--json") == 0;
  kbuild_loader *loader = kbuild_loader_open(argv[1], argv[2], NULL, 0);
  if (!loader) {
    fprintf(stderr, "error: %s\n", kbuild_last_error());
    return 2;
  }
  char *text = kbuild_loader_explain(loader, json);
  if (!text) {
    fprintf(stderr, "error: %s\n", kbuild_last_error());
    kbuild_loader_close(loader);
    return 2;
  }
  fputs(text, stdout);
  kbuild_string_free(text);

  char *target = kbuild_loader_selected_target(loader, "rmsnorm", NULL);
  if (target) {
    printf("rmsnorm on %s: %s\n", kbuild_loader_device(loader), target);
    kbuild_string_free(target);
  } else {
    printf("rmsnorm on %s: %s\n", kbuild_loader_device(loader), kbuild_last_error());
  }

  kbuild_function *f = kbuild_loader_get_function(loader, "rmsnorm", NULL, "rmsnorm_f32");
  if (f) {
    printf("loaded rmsnorm_f32\n");
    kbuild_function_free(f);
  } else {
    printf("not loaded: %s\n", kbuild_last_error());
  }

  int complete = kbuild_loader_complete(loader);
  kbuild_loader_close(loader);
  return complete == 1 ? 0 : 1;
}
