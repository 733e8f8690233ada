"""This project's controller component, as ``src/bolts/`` and ``src/spouts/`` hold its
bolts and spouts: the controller bolt every elastic topology here names
(``controller_bolt``), thin over elastorm's."""
