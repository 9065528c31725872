/* Model builders living outside zoo.c (the zoo's table names them). */
#ifndef KILN_NN_MODELS_H
#define KILN_NN_MODELS_H
#include "kiln/nn.h"

/* GPT-2's layout (src/nn/gpt.c); errors go to the graph's sticky status */
void kiln_zoo_gpt(kiln_graph *g, kiln_model *m, const kiln_model_opts *o);
/* o's GPT shape with each 0 replaced by its default */
kiln_gpt_config kiln_gpt_resolve(const kiln_gpt_config *c);

#endif
