"""The micro-world as an env task (:mod:`envs.microworld.task`) and its trainer (:mod:`envs.microworld.build`);
the world files themselves are foundation, in :mod:`envs.core.microworld`."""
