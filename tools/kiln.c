#include <stdio.h>
int main(void) { fprintf(stderr, "kiln: under construction\n"); return 2; }
