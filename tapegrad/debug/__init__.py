"""The debug layer: drawing a graph (``tg.viz``) and tape statistics
(``tg.tape_stats``)."""
