pytest_plugins = ["patchspec.testing"]  # the kit: make_model, run_spec, the patchspec_run fixture
