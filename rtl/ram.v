// ttrain_ram: simple dual-port RAM template for the large banked stores (rtl/store.py).
//
// Same timing as amaranth.lib.memory.Memory with one synchronous, non-transparent read port
// and one write port in the same clock domain: rdata shows mem[raddr] one cycle after a cycle
// with ren high (and holds while ren is low); a write lands at the clock edge; a read of the
// word being written returns the old word. No initial block (so elaboration and Verilator stay
// fast for megabyte stores); contents start at zero in simulation and undefined on silicon.
// STYLE selects the Xilinx mapping: "block" (RAMB36E2/RAMB18E2) or "ultra" (URAM288).
module ttrain_ram #(
    parameter integer WIDTH = 32,
    parameter integer DEPTH = 1024,
    parameter integer ABITS = 10,
    parameter STYLE = "block"
) (
    input  wire             clk,
    input  wire             ren,
    input  wire [ABITS-1:0] raddr,
    output reg  [WIDTH-1:0] rdata,
    input  wire             we,
    input  wire [ABITS-1:0] waddr,
    input  wire [WIDTH-1:0] wdata
);
    generate
        if (STYLE == "ultra") begin : g_ultra
            (* ram_style = "ultra" *) reg [WIDTH-1:0] mem [0:DEPTH-1];
            always @(posedge clk) begin
                if (we) mem[waddr] <= wdata;
                if (ren) rdata <= mem[raddr];
            end
        end else begin : g_block
            (* ram_style = "block" *) reg [WIDTH-1:0] mem [0:DEPTH-1];
            always @(posedge clk) begin
                if (we) mem[waddr] <= wdata;
                if (ren) rdata <= mem[raddr];
            end
        end
    endgenerate
endmodule
