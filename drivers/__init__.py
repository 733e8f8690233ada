"""This project's drivers: ``drivers/NAME.py`` runs ``topologies/NAME.py`` and checks it
(``elastorm local NAME``; see ``elastorm.runtime.drivers``)."""
