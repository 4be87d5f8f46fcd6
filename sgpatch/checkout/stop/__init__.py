"""The stop for a person: what ``port`` and ``edit`` share while they wait for a resolution.

``kinds``     the records, typed (``PortRecord``, ``EditRecord`` and their shared parts), and their kinds;
``record``    the records in the checkout's git directory: one reader (bounded, no link, no FIFO), one writer;
``fields``    the one validator: a record's fields checked against what the command itself writes, then typed;
``recovery``  one recovery after a kill: what a killed port left beside a checkout, a half-done move, and each
              step a command registered (``Steps``) finished from its record;
``markers``   the conflict markers left for the person (complete triples) and the refusal to take them back;
``here``      whether a port or an edit is stopped in a checkout, for every other command to say so;
``project``   one such command at a time per project.
"""
