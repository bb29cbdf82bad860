"""From a model to a spec: the commands that write specs for the user (``init``, ``derive``) and the
suggestions ``inspect --suggest`` prints. Everything here reads graphs only, never weights, and every
spec it writes is checked by the spec loader before it is shown or saved."""
