"""tftune.tuner.searchspace: what the study searches.

The knobs and the space built from discovery, the `--space` file, the config a point of
the space becomes, the tf.data service's knobs, what the platform allows, and the
measurements that shape the space before the study: bounds, the pipeline screen and the
guided profile.
"""
