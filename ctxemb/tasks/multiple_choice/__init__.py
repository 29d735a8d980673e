"""Multiple choice (SWAG, COPA, RACE-style tasks): a context and several candidate continuations or answers, one of
them right; the model scores each (context, choice) pair and a softmax over the choices picks one."""
