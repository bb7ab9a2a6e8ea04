// The calling thread's last error message for gorun_last_error.
#include <stdlib.h>

static __thread char *gorun_err;

void gorun_set_error(char *msg) {
	free(gorun_err);
	gorun_err = msg;
}

const char *gorun_get_error(void) {
	return gorun_err ? gorun_err : "";
}
