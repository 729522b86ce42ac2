// ttrain_ram_block / ttrain_ram_ultra: simple dual-port RAM templates for the large banked
// stores (rtl/store.py), one module per Xilinx mapping (no generate block: Verilator 5.048's
// VPI scope iteration crashes on generate scopes inside Amaranth's escaped module names).
//
// Same timing as amaranth.lib.memory.Memory with one synchronous, non-transparent read port
// and one write port in the same clock domain: rdata shows mem[raddr] one cycle after a cycle
// with ren high (and holds while ren is low); a write lands at the clock edge; a read of the
// word being written returns the old word. No initial block (so elaboration and Verilator stay
// fast for megabyte stores); contents start at zero in simulation and undefined on silicon.
//
// Two modules in one file on purpose (one template, two mappings): waive DECLFILENAME here.
/* verilator lint_off DECLFILENAME */
module ttrain_ram_block #(
    parameter integer WIDTH = 32,
    parameter integer DEPTH = 1024,
    parameter integer ABITS = 10
) (
    input  wire             clk,
    input  wire             ren,
    input  wire [ABITS-1:0] raddr,
    output reg  [WIDTH-1:0] rdata,
    input  wire             we,
    input  wire [ABITS-1:0] waddr,
    input  wire [WIDTH-1:0] wdata
);
    (* ram_style = "block" *) reg [WIDTH-1:0] mem [0:DEPTH-1];
    always @(posedge clk) begin
        if (we) mem[waddr] <= wdata;
        if (ren) rdata <= mem[raddr];
    end
endmodule

module ttrain_ram_ultra #(
    parameter integer WIDTH = 32,
    parameter integer DEPTH = 4096,
    parameter integer ABITS = 12
) (
    input  wire             clk,
    input  wire             ren,
    input  wire [ABITS-1:0] raddr,
    output reg  [WIDTH-1:0] rdata,
    input  wire             we,
    input  wire [ABITS-1:0] waddr,
    input  wire [WIDTH-1:0] wdata
);
    (* ram_style = "ultra" *) reg [WIDTH-1:0] mem [0:DEPTH-1];
    always @(posedge clk) begin
        if (we) mem[waddr] <= wdata;
        if (ren) rdata <= mem[raddr];
    end
endmodule
/* verilator lint_on DECLFILENAME */
